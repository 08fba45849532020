package account_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
)

var ctx = context.Background()

func ptr[T any](v T) *T { return &v }

// wantInvalid fails unless err is a ValidationError of field with code.
func wantInvalid(t *testing.T, err error, field, code string) {
	t.Helper()
	var v *account.ValidationError
	if !errors.As(err, &v) || v.Field != field || v.Code != code {
		t.Fatalf("error %v, want a ValidationError of %s with code %s", err, field, code)
	}
}

func alice(t *testing.T, f *fixture, pw string) account.User {
	return account.User{ID: "u1", Email: "alice@example.com", FullName: "Alice", EDV: "E-1", Role: account.RoleUser, PasswordHash: f.hash(t, pw)}
}

func TestUpdateSelfRefusesBadInputBeforeReadingTheStore(t *testing.T) {
	f := newFixture(t)
	f.users.ByIDFn = func(context.Context, string) (account.User, error) {
		t.Error("the store was read for a patch that is refused")
		return account.User{}, nil
	}
	caller := account.Caller{UserID: "u1"}
	for _, tc := range []struct {
		name        string
		patch       account.SelfPatch
		field, code string
	}{
		{"email400NotAnAddress", account.SelfPatch{Email: ptr("not-an-address")}, "email", "invalid_email"},
		{"email400DisplayName", account.SelfPatch{Email: ptr("Alice <alice@example.com>")}, "email", "invalid_email"},
		{"fullName400Empty", account.SelfPatch{FullName: ptr("   ")}, "fullName", "invalid_value"},
		{"fullName400TooLong", account.SelfPatch{FullName: ptr(strings.Repeat("é", 201))}, "fullName", "invalid_value"},
		{"avatar400NotHTTP", account.SelfPatch{AvatarURL: ptr("javascript:alert(1)")}, "avatarUrl", "invalid_url"},
		{"avatar400Credentials", account.SelfPatch{AvatarURL: ptr("https://u:p@example.com/a.png")}, "avatarUrl", "invalid_url"},
		{"password400NoOld", account.SelfPatch{Password: &account.PasswordChange{New: ptr("new-password-1")}}, "password.old", "missing_field"},
		{"password400NoNew", account.SelfPatch{Password: &account.PasswordChange{Old: ptr("old-password-1")}}, "password.new", "missing_field"},
		{"password400NewTooShort", account.SelfPatch{Password: &account.PasswordChange{Old: ptr("old-password-1"), New: ptr("short")}}, "password.new", "invalid_password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := f.svc.UpdateSelf(ctx, caller, tc.patch)
			wantInvalid(t, err, tc.field, tc.code)
		})
	}
	t.Run("empty400", func(t *testing.T) {
		if _, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{}); !errors.Is(err, account.ErrEmptyPatch) {
			t.Fatalf("empty patch: %v, want ErrEmptyPatch", err)
		}
	})
}

// A plain edit is stored trimmed, the user's cached identities are revoked,
// and no session changes.
func TestUpdateSelfStoresTheEditAndRevokesTheUser(t *testing.T) {
	f := newFixture(t)
	u := alice(t, f, "alice-password")
	f.withUser(u)
	var stored account.UserPatch
	f.users.UpdateFn = func(_ context.Context, id string, p account.UserPatch, _ time.Time) (account.User, error) {
		if id != u.ID {
			t.Errorf("updated %s, want %s", id, u.ID)
		}
		stored = p
		u.FullName = *p.FullName
		return u, nil
	}
	f.sessions.DeleteByUserFn = func(context.Context, string, string) ([]string, error) {
		t.Error("sessions ended by an edit without a password")
		return nil, nil
	}
	got, ns, err := f.svc.UpdateSelf(ctx, account.Caller{UserID: u.ID}, account.SelfPatch{FullName: ptr("  Alice Liddell  "), Sector: ptr("")})
	if err != nil || ns != nil {
		t.Fatalf("UpdateSelf: %v, new session %v", err, ns)
	}
	if got.FullName != "Alice Liddell" || stored.FullName == nil || *stored.FullName != "Alice Liddell" {
		t.Fatalf("stored %+v, returned %q; want the trimmed name", stored, got.FullName)
	}
	if stored.Sector == nil || *stored.Sector != "" || stored.PasswordHash != nil || stored.Email != nil {
		t.Fatalf("patch %+v: want the sector cleared and nothing else", stored)
	}
	if revs := f.pub.all(); len(revs) != 1 || !slices.Equal(revs[0].Users, []string{u.ID}) || len(revs[0].Sessions) != 0 {
		t.Fatalf("revocations %+v, want the user's only", revs)
	}
}

// A password change with the right old password stores a new hash, ends
// every session of the user, opens a new one for the caller, and announces
// the ended sessions with the user.
func TestUpdateSelfPasswordChange(t *testing.T) {
	f := newFixture(t)
	u := alice(t, f, "old-password-1")
	f.withUser(u)
	var newHash string
	f.users.UpdateFn = func(_ context.Context, _ string, p account.UserPatch, _ time.Time) (account.User, error) {
		if p.PasswordHash == nil {
			t.Fatal("no new hash stored")
		}
		newHash = *p.PasswordHash
		return u, nil
	}
	f.sessions.DeleteByUserFn = func(_ context.Context, userID, except string) ([]string, error) {
		if userID != u.ID || except != "" {
			t.Errorf("DeleteByUser(%s, %q), want every session of %s", userID, except, u.ID)
		}
		return []string{"s-a", "s-b"}, nil
	}
	var created []account.Session
	f.sessions.CreateFn = func(_ context.Context, s account.Session) error {
		created = append(created, s)
		return nil
	}
	_, ns, err := f.svc.UpdateSelf(ctx, account.Caller{UserID: u.ID, Client: account.Client{IP: "192.0.2.1"}},
		account.SelfPatch{Password: &account.PasswordChange{Old: ptr("old-password-1"), New: ptr("new-password-1")}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := f.hasher.Verify(ctx, "new-password-1", newHash); !ok || err != nil {
		t.Fatalf("the stored hash does not verify the new password: %v", err)
	}
	if ns == nil || len(created) != 1 || created[0].ID != account.HashSecret(ns.Secret) || created[0].UserID != u.ID || created[0].IP != "192.0.2.1" {
		t.Fatalf("new session %+v, stored %+v", ns, created)
	}
	revs := f.pub.all()
	if len(revs) != 1 || !slices.Equal(revs[0].Sessions, []string{"s-a", "s-b"}) || !slices.Equal(revs[0].Users, []string{u.ID}) {
		t.Fatalf("revocations %+v, want both ended sessions and the user", revs)
	}
}

// A wrong current password is refused and counted against the account like
// a failed sign-in; a locked account is refused before the password is
// checked.
func TestUpdateSelfWrongPasswordIsThrottled(t *testing.T) {
	f := newFixture(t)
	u := alice(t, f, "old-password-1")
	f.withUser(u)
	var failed []string
	f.throttle.FailFn = func(_ context.Context, key string, rule account.ThrottleRule, _ time.Time) error {
		if rule != policy.Account {
			t.Errorf("failure counted under %+v, want the account rule", rule)
		}
		failed = append(failed, key)
		return nil
	}
	f.users.UpdateFn = func(context.Context, string, account.UserPatch, time.Time) (account.User, error) {
		t.Error("user updated after a wrong password")
		return u, nil
	}
	change := account.SelfPatch{Password: &account.PasswordChange{Old: ptr("not-the-password"), New: ptr("new-password-1")}}
	if _, _, err := f.svc.UpdateSelf(ctx, account.Caller{UserID: u.ID}, change); !errors.Is(err, account.ErrWrongPassword) {
		t.Fatalf("wrong password: %v, want ErrWrongPassword", err)
	}
	if len(failed) != 1 || !strings.HasPrefix(failed[0], "account:") {
		t.Fatalf("failures counted %v, want one on the account key", failed)
	}

	f.throttle.CheckFn = func(_ context.Context, keys []string) (map[string]time.Time, error) {
		return map[string]time.Time{keys[0]: time.Now().Add(time.Minute)}, nil
	}
	change.Password.Old = ptr("old-password-1") // right, but locked
	_, _, err := f.svc.UpdateSelf(ctx, account.Caller{UserID: u.ID}, change)
	var te *account.ThrottledError
	if !errors.As(err, &te) || te.RetryAfter <= 0 || te.RetryAfter > time.Minute+time.Second { // now is cut to milliseconds
		t.Fatalf("locked account: %v, want a ThrottledError of about a minute", err)
	}
	if len(failed) != 1 {
		t.Fatalf("a locked attempt was counted again: %v", failed)
	}
}

func TestUpdateSelfOfDeletedUserIsGone(t *testing.T) {
	f := newFixture(t) // no user in the store
	if _, _, err := f.svc.UpdateSelf(ctx, account.Caller{UserID: "u1"}, account.SelfPatch{FullName: ptr("x")}); !errors.Is(err, account.ErrUserGone) {
		t.Fatalf("UpdateSelf of a missing user: %v, want ErrUserGone", err)
	}
	// Deleted between the read and the write: still gone, and caches are
	// not told of a change that did not happen.
	u := alice(t, f, "alice-password")
	f.withUser(u)
	if _, _, err := f.svc.UpdateSelf(ctx, account.Caller{UserID: u.ID}, account.SelfPatch{FullName: ptr("x")}); !errors.Is(err, account.ErrUserGone) {
		t.Fatalf("UpdateSelf of a user deleted meanwhile: %v, want ErrUserGone", err)
	}
	if revs := f.pub.all(); len(revs) != 0 {
		t.Fatalf("revocations %+v after a write that found no user", revs)
	}
}

// A store failure whose outcome is unknown still revokes the user, so no
// cache keeps what may be stale.
func TestUpdateSelfStoreFailureRevokes(t *testing.T) {
	f := newFixture(t)
	u := alice(t, f, "alice-password")
	f.withUser(u)
	outage := errors.New("connection reset")
	f.users.UpdateFn = func(context.Context, string, account.UserPatch, time.Time) (account.User, error) {
		return account.User{}, outage
	}
	if _, _, err := f.svc.UpdateSelf(ctx, account.Caller{UserID: u.ID}, account.SelfPatch{FullName: ptr("x")}); !errors.Is(err, outage) {
		t.Fatalf("UpdateSelf: %v, want the store's error", err)
	}
	if revs := f.pub.all(); len(revs) != 1 || !slices.Equal(revs[0].Users, []string{u.ID}) {
		t.Fatalf("revocations %+v, want the user's", revs)
	}
}

func TestUpdateUserByAdmin(t *testing.T) {
	t.Run("selfDemote409", func(t *testing.T) {
		f := newFixture(t)
		if _, err := f.svc.UpdateUser(ctx, "a1", "a1", account.AdminPatch{Role: ptr(account.RoleUser)}); !errors.Is(err, account.ErrSelfDemote) {
			t.Fatalf("self-demotion: %v, want ErrSelfDemote", err)
		}
	})
	t.Run("role400", func(t *testing.T) {
		f := newFixture(t)
		_, err := f.svc.UpdateUser(ctx, "a1", "u1", account.AdminPatch{Role: ptr("root")})
		wantInvalid(t, err, "roleName", "invalid_role")
	})
	t.Run("empty400", func(t *testing.T) {
		f := newFixture(t)
		if _, err := f.svc.UpdateUser(ctx, "a1", "u1", account.AdminPatch{}); !errors.Is(err, account.ErrEmptyPatch) {
			t.Fatalf("empty patch: %v", err)
		}
	})
	t.Run("notFound404", func(t *testing.T) {
		f := newFixture(t)
		if _, err := f.svc.UpdateUser(ctx, "a1", "nobody", account.AdminPatch{FullName: ptr("x")}); !errors.Is(err, account.ErrUserNotFound) {
			t.Fatalf("missing user: %v", err)
		}
	})
	// A new address is stored unverified; a new password ends every session
	// of the user, announced with the user.
	t.Run("emailAndPassword200", func(t *testing.T) {
		f, u, p := verifiedAlice(t)
		f.sessions.DeleteByUserFn = func(context.Context, string, string) ([]string, error) { return []string{"s1"}, nil }
		if _, err := f.svc.UpdateUser(ctx, "a1", u.ID, account.AdminPatch{Email: ptr("alice@new.example.com"), NewPassword: ptr("set-by-admin-1")}); err != nil {
			t.Fatal(err)
		}
		if p.EmailVerified == nil || *p.EmailVerified || p.Email == nil || *p.Email != "alice@new.example.com" {
			t.Fatalf("patch %+v: want the new address, unverified", p)
		}
		if p.PasswordHash == nil {
			t.Fatal("no password hash stored")
		}
		if ok, _, _ := f.hasher.Verify(ctx, "set-by-admin-1", *p.PasswordHash); !ok {
			t.Fatal("the stored hash does not verify the new password")
		}
		if revs := f.pub.all(); len(revs) != 1 || !slices.Equal(revs[0].Sessions, []string{"s1"}) || !slices.Equal(revs[0].Users, []string{u.ID}) {
			t.Fatalf("revocations %+v", revs)
		}
	})
	// The same address in another case is not a change of address.
	t.Run("emailCase200", func(t *testing.T) {
		f, u, p := verifiedAlice(t)
		if _, err := f.svc.UpdateUser(ctx, "a1", u.ID, account.AdminPatch{Email: ptr("Alice@Example.com")}); err != nil {
			t.Fatal(err)
		}
		if p.EmailVerified != nil {
			t.Fatalf("a change of case unverified the address: %+v", p)
		}
	})
}

// verifiedAlice is a fixture holding Alice with a verified address; the
// patch the store receives is kept in the returned UserPatch.
func verifiedAlice(t *testing.T) (*fixture, account.User, *account.UserPatch) {
	f := newFixture(t)
	u := alice(t, f, "alice-password")
	u.EmailVerified = true
	f.withUser(u)
	p := &account.UserPatch{}
	f.users.UpdateFn = func(_ context.Context, _ string, got account.UserPatch, _ time.Time) (account.User, error) {
		*p = got
		return u, nil
	}
	return f, u, p
}

func TestCreateUserValidates(t *testing.T) {
	f := newFixture(t)
	f.users.CreateFn = func(context.Context, account.User) (account.User, error) {
		t.Error("an invalid user was stored")
		return account.User{}, nil
	}
	ok := account.NewUserInput{Email: "bob@example.com", Password: "bob-password", FullName: "Bob", EDV: "E-2"}
	for _, tc := range []struct {
		name        string
		edit        func(*account.NewUserInput)
		field, code string
	}{
		{"email400", func(in *account.NewUserInput) { in.Email = "bob" }, "email", "invalid_email"},
		{"email400NoDot", func(in *account.NewUserInput) { in.Email = "bob@localhost" }, "email", "invalid_email"},
		{"password400Short", func(in *account.NewUserInput) { in.Password = "1234567" }, "password", "invalid_password"},
		{"password400Long", func(in *account.NewUserInput) { in.Password = strings.Repeat("p", 1025) }, "password", "invalid_password"},
		{"fullName400", func(in *account.NewUserInput) { in.FullName = "" }, "fullName", "invalid_value"},
		{"edv400", func(in *account.NewUserInput) { in.EDV = strings.Repeat("e", 101) }, "edv", "invalid_value"},
		{"role400", func(in *account.NewUserInput) { in.Role = "owner" }, "roleName", "invalid_role"},
		{"sector400", func(in *account.NewUserInput) { in.Sector = ptr("\xff") }, "sector", "invalid_value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := ok
			tc.edit(&in)
			_, err := f.svc.CreateUser(ctx, in)
			wantInvalid(t, err, tc.field, tc.code)
		})
	}
}

func TestCreateUserStoresAHashAndDefaults(t *testing.T) {
	f := newFixture(t)
	var stored account.User
	f.users.CreateFn = func(_ context.Context, u account.User) (account.User, error) {
		stored = u
		u.ID = "u9"
		return u, nil
	}
	u, err := f.svc.CreateUser(ctx, account.NewUserInput{Email: " bob@example.com ", Password: "bob-password", FullName: "Bob", EDV: "E-2", Sector: ptr("")})
	if err != nil {
		t.Fatal(err)
	}
	if u.ID != "u9" || stored.Role != account.RoleUser || stored.Email != "bob@example.com" || stored.Sector != nil || stored.EmailVerified {
		t.Fatalf("stored %+v: want role user, the trimmed address, no sector, unverified", stored)
	}
	if stored.PasswordHash == "" || strings.Contains(stored.PasswordHash, "bob-password") {
		t.Fatalf("password stored as %q", stored.PasswordHash)
	}
	if ok, _, _ := f.hasher.Verify(ctx, "bob-password", stored.PasswordHash); !ok {
		t.Fatal("the stored hash does not verify the password")
	}
	f.users.CreateFn = func(context.Context, account.User) (account.User, error) {
		return account.User{}, account.ErrEmailTaken
	}
	if _, err := f.svc.CreateUser(ctx, account.NewUserInput{Email: "bob@example.com", Password: "bob-password", FullName: "Bob", EDV: "E-2"}); !errors.Is(err, account.ErrEmailTaken) {
		t.Fatalf("taken address: %v, want ErrEmailTaken", err)
	}
}

func TestDeleteUser(t *testing.T) {
	f := newFixture(t)
	if err := f.svc.DeleteUser(ctx, "a1", "a1"); !errors.Is(err, account.ErrSelfDelete) {
		t.Fatalf("self-deletion: %v, want ErrSelfDelete", err)
	}
	u := alice(t, f, "alice-password")
	f.withUser(u)
	var deleted []string
	f.users.DeleteFn = func(_ context.Context, id string) error {
		deleted = append(deleted, id)
		return nil
	}
	f.sessions.DeleteByUserFn = func(context.Context, string, string) ([]string, error) { return []string{"s1", "s2"}, nil }
	var announced []string
	f.svc.SetUserEvents(&userEvents{DeletedFn: func(_ context.Context, id string) error {
		announced = append(announced, id)
		return nil
	}})
	if err := f.svc.DeleteUser(ctx, "a1", u.ID); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deleted, []string{u.ID}) || !slices.Equal(announced, []string{u.ID}) {
		t.Fatalf("deleted %v, announced %v; want %s once each", deleted, announced, u.ID)
	}
	if revs := f.pub.all(); len(revs) != 1 || !slices.Equal(revs[0].Sessions, []string{"s1", "s2"}) || !slices.Equal(revs[0].Users, []string{u.ID}) {
		t.Fatalf("revocations %+v", revs)
	}
}

func TestListUsersValidatesThePage(t *testing.T) {
	f := newFixture(t)
	var skip, limit int
	f.users.ListFn = func(_ context.Context, s, l int) ([]account.User, int64, error) {
		skip, limit = s, l
		return nil, 0, nil
	}
	for _, tc := range []struct {
		name        string
		page, limit int
		field       string
	}{
		{"page400Zero", 0, 10, "page"},
		{"limit400Zero", 1, 0, "limit"},
		{"limit400Over", 1, 101, "limit"},
		{"page400Huge", 1 << 30, 100, "page"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := f.svc.ListUsers(ctx, tc.page, tc.limit)
			wantInvalid(t, err, tc.field, "invalid_value")
		})
	}
	if _, _, err := f.svc.ListUsers(ctx, 3, 20); err != nil || skip != 40 || limit != 20 {
		t.Fatalf("page 3 of 20: skip %d limit %d, %v", skip, limit, err)
	}
}

func TestSignIn(t *testing.T) {
	f := newFixture(t)
	u := alice(t, f, "alice-password")
	f.withUser(u)
	var failed []string
	f.throttle.FailFn = func(_ context.Context, key string, _ account.ThrottleRule, _ time.Time) error {
		failed = append(failed, key)
		return nil
	}
	in := account.SignInInput{Email: "ALICE@example.com ", Password: "wrong-password", Client: account.Client{IP: "192.0.2.7"}}
	t.Run("signin401WrongPassword", func(t *testing.T) {
		failed = nil
		if _, _, _, err := f.svc.SignIn(ctx, in); !errors.Is(err, account.ErrInvalidCredentials) {
			t.Fatalf("wrong password: %v", err)
		}
		if len(failed) != 2 || !strings.HasPrefix(failed[0], "account:") || failed[1] != "address:192.0.2.7" {
			t.Fatalf("failures counted on %v, want the account and the address", failed)
		}
	})
	t.Run("signin401UnknownEmail", func(t *testing.T) {
		failed = nil
		in := in
		in.Email = "nobody@example.com"
		if _, _, _, err := f.svc.SignIn(ctx, in); !errors.Is(err, account.ErrInvalidCredentials) {
			t.Fatalf("unknown address: %v", err)
		}
		if len(failed) != 2 {
			t.Fatalf("failures counted on %v, want two as for a wrong password", failed)
		}
	})
	t.Run("signin400", func(t *testing.T) {
		in := in
		in.Email = ""
		_, _, _, err := f.svc.SignIn(ctx, in)
		wantInvalid(t, err, "email", "invalid_email")
	})
	t.Run("signin429Locked", func(t *testing.T) {
		f.throttle.CheckFn = func(_ context.Context, keys []string) (map[string]time.Time, error) {
			return map[string]time.Time{keys[len(keys)-1]: time.Now().Add(30 * time.Second)}, nil
		}
		defer func() { f.throttle.CheckFn = nil }()
		in := in
		in.Password = "alice-password" // right, but the address is locked
		var te *account.ThrottledError
		if _, _, _, err := f.svc.SignIn(ctx, in); !errors.As(err, &te) {
			t.Fatalf("locked: %v, want ThrottledError", err)
		}
	})
	t.Run("signin200", func(t *testing.T) {
		var reset []string
		f.throttle.CheckFn = func(_ context.Context, keys []string) (map[string]time.Time, error) {
			return map[string]time.Time{keys[0]: {}}, nil // earlier failures, no lock
		}
		f.throttle.ResetFn = func(_ context.Context, key string) error {
			reset = append(reset, key)
			return nil
		}
		var stored account.Session
		f.sessions.CreateFn = func(_ context.Context, s account.Session) error {
			stored = s
			return nil
		}
		in := in
		in.Password = "alice-password"
		secret, sess, got, err := f.svc.SignIn(ctx, in)
		if err != nil || got.ID != u.ID {
			t.Fatalf("SignIn: %v %+v", err, got)
		}
		if len(secret) != account.SecretLength || sess.ID != account.HashSecret(secret) || stored.ID != sess.ID || strings.Contains(stored.ID, secret) {
			t.Fatalf("secret %q, session %+v, stored %+v", secret, sess, stored)
		}
		if got, want := sess.ExpiresAt.Sub(sess.CreatedAt), policy.SessionTTL; got != want {
			t.Fatalf("session lifetime %v, want %v", got, want)
		}
		if len(reset) != 1 || !strings.HasPrefix(reset[0], "account:") {
			t.Fatalf("throttle reset %v, want the account's", reset)
		}
	})
}

func TestResolve(t *testing.T) {
	f := newFixture(t)
	u := alice(t, f, "alice-password")
	f.withUser(u)
	secret, _, _, err := f.svc.SignIn(ctx, account.SignInInput{Email: u.Email, Password: "alice-password"})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]account.Session{}
	f.sessions.ByIDFn = func(_ context.Context, id string) (account.Session, error) {
		s, ok := stored[id]
		if !ok {
			return account.Session{}, account.ErrSessionNotFound
		}
		return s, nil
	}
	var deleted []string
	f.sessions.DeleteFn = func(_ context.Context, id string) error {
		deleted = append(deleted, id)
		return nil
	}
	var touched int
	f.sessions.TouchFn = func(context.Context, string, time.Time, time.Time) error {
		touched++
		return nil
	}
	id := account.HashSecret(secret)

	for _, bad := range []string{"", "short", strings.Repeat("!", account.SecretLength), secret} { // the last: not stored
		if _, _, err := f.svc.Resolve(ctx, bad); !errors.Is(err, account.ErrInvalidSession) {
			t.Fatalf("Resolve(%q): %v, want ErrInvalidSession", bad, err)
		}
	}
	now := time.Now()
	stored[id] = account.Session{ID: id, UserID: u.ID, CreatedAt: now, LastSeenAt: now.Add(-2 * time.Minute), ExpiresAt: now.Add(time.Hour)}
	got, s, err := f.svc.Resolve(ctx, secret)
	if err != nil || got.ID != u.ID || s.ID != id || touched != 1 {
		t.Fatalf("live session: %v %+v, touched %d", err, s, touched)
	}
	// Idle past the idle timeout: refused and deleted.
	stored[id] = account.Session{ID: id, UserID: u.ID, CreatedAt: now.Add(-48 * time.Hour), LastSeenAt: now.Add(-policy.SessionIdle - time.Second), ExpiresAt: now.Add(time.Hour)}
	if _, _, err := f.svc.Resolve(ctx, secret); !errors.Is(err, account.ErrInvalidSession) || !slices.Equal(deleted, []string{id}) {
		t.Fatalf("idle session: %v, deleted %v", err, deleted)
	}
	// Past its absolute expiry although used a moment ago: refused.
	stored[id] = account.Session{ID: id, UserID: u.ID, LastSeenAt: now, ExpiresAt: now.Add(-time.Second)}
	if _, _, err := f.svc.Resolve(ctx, secret); !errors.Is(err, account.ErrInvalidSession) {
		t.Fatalf("expired session: %v", err)
	}
	// The user is gone: the session is no longer valid.
	stored[id] = account.Session{ID: id, UserID: "deleted-user", LastSeenAt: now, ExpiresAt: now.Add(time.Hour)}
	if _, _, err := f.svc.Resolve(ctx, secret); !errors.Is(err, account.ErrInvalidSession) {
		t.Fatalf("session of a deleted user: %v", err)
	}
}

func TestSessionsListsOnlyLiveOnes(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	live := account.Session{ID: "live", PublicID: "p1", LastSeenAt: now, ExpiresAt: now.Add(time.Hour)}
	idle := account.Session{ID: "idle", PublicID: "p2", LastSeenAt: now.Add(-25 * time.Hour), ExpiresAt: now.Add(time.Hour)}
	over := account.Session{ID: "over", PublicID: "p3", LastSeenAt: now, ExpiresAt: now.Add(-time.Minute)}
	f.sessions.ListByUserFn = func(context.Context, string) ([]account.Session, error) {
		return []account.Session{live, idle, over}, nil
	}
	got, err := f.svc.Sessions(ctx, "u1")
	if err != nil || len(got) != 1 || got[0].ID != "live" {
		t.Fatalf("Sessions: %+v %v, want only the live one", got, err)
	}
	if exp := f.svc.ExpiresAt(idle); !exp.Equal(idle.LastSeenAt.Add(policy.SessionIdle)) {
		t.Fatalf("ExpiresAt of an idle session %v, want its idle expiry", exp)
	}
}

func TestEndSessions(t *testing.T) {
	f := newFixture(t)
	if err := f.svc.EndSession(ctx, "u1", ""); !errors.Is(err, account.ErrSessionNotFound) {
		t.Fatalf("EndSession without an id: %v", err)
	}
	f.sessions.ByPublicIDFn = func(_ context.Context, userID, publicID string) (account.Session, error) {
		if userID != "u1" || publicID != "p1" { // another user's session is not found
			return account.Session{}, account.ErrSessionNotFound
		}
		return account.Session{ID: "h1", PublicID: "p1", UserID: "u1"}, nil
	}
	f.sessions.DeleteFn = func(context.Context, string) error { return nil }
	if err := f.svc.EndSession(ctx, "u2", "p1"); !errors.Is(err, account.ErrSessionNotFound) {
		t.Fatalf("ending another user's session: %v", err)
	}
	if err := f.svc.SignOut(ctx, account.Caller{UserID: "u1", SessionID: "p1"}); err != nil {
		t.Fatal(err)
	}
	var except string
	f.sessions.DeleteByUserFn = func(_ context.Context, _ string, e string) ([]string, error) {
		except = e
		return []string{"h2", "h3"}, nil
	}
	n, err := f.svc.EndOtherSessions(ctx, account.Caller{UserID: "u1", SessionID: "p1"})
	if err != nil || n != 2 || except != "h1" {
		t.Fatalf("EndOtherSessions: %d %v, kept %q; want 2 ended and h1 kept", n, err, except)
	}
	revs := f.pub.all()
	if len(revs) != 2 || !slices.Equal(revs[0].Sessions, []string{"h1"}) || !slices.Equal(revs[1].Sessions, []string{"h2", "h3"}) {
		t.Fatalf("revocations %+v", revs)
	}
}

func TestEnsureAdmin(t *testing.T) {
	f := newFixture(t)
	var stored account.User
	f.users.CreateFn = func(_ context.Context, u account.User) (account.User, error) {
		stored = u
		return u, nil
	}
	created, generated, err := f.svc.EnsureAdmin(ctx, "root@example.com", "")
	if err != nil || !created || len(generated) != 20 {
		t.Fatalf("EnsureAdmin: %v created %v, generated %q", err, created, generated)
	}
	if stored.Role != account.RoleAdmin || !stored.EmailVerified {
		t.Fatalf("admin stored as %+v", stored)
	}
	if ok, _, _ := f.hasher.Verify(ctx, generated, stored.PasswordHash); !ok {
		t.Fatal("the generated password does not sign in")
	}
	f.withUser(stored)
	if created, generated, err := f.svc.EnsureAdmin(ctx, "ROOT@example.com", ""); err != nil || created || generated != "" {
		t.Fatalf("second EnsureAdmin: %v %v %q, want nothing done", err, created, generated)
	}
}
