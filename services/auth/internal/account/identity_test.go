package account_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
)

// identityStore is an account.IdentityStore in a slice (unit tests only;
// mongostore's is tested on the real server).
type identityStore struct {
	list    []account.Identity
	deleted []string
}

func (f *identityStore) Create(_ context.Context, i account.Identity) (account.Identity, error) {
	for _, v := range f.list {
		if v.Issuer == i.Issuer && v.Subject == i.Subject {
			return account.Identity{}, account.ErrIdentityTaken
		}
	}
	i.ID = i.Issuer + "|" + i.Subject
	f.list = append(f.list, i)
	return i, nil
}

func (f *identityStore) BySubject(_ context.Context, iss, sub string) (account.Identity, error) {
	for _, v := range f.list {
		if v.Issuer == iss && v.Subject == sub {
			return v, nil
		}
	}
	return account.Identity{}, account.ErrIdentityNotFound
}

func (f *identityStore) ListByUser(_ context.Context, userID string) ([]account.Identity, error) {
	var out []account.Identity
	for _, v := range f.list {
		if v.UserID == userID {
			out = append(out, v)
		}
	}
	return out, nil
}

func (f *identityStore) Used(context.Context, string, string, time.Time) error { return nil }

func (f *identityStore) Invite(_ context.Context, i account.Identity) (account.Identity, error) {
	if _, err := f.Invitation(context.Background(), i.Provider, i.Email); err == nil {
		return account.Identity{}, account.ErrIdentityTaken
	}
	i.ID, i.Pending = "invite|"+i.Provider+"|"+i.Email, true
	f.list = append(f.list, i)
	return i, nil
}

func (f *identityStore) Invitation(_ context.Context, provider, email string) (account.Identity, error) {
	for _, v := range f.list {
		if v.Pending && v.Provider == provider && v.Email == email {
			return v, nil
		}
	}
	return account.Identity{}, account.ErrIdentityNotFound
}

func (f *identityStore) Delete(_ context.Context, userID, id string) error {
	i := slices.IndexFunc(f.list, func(v account.Identity) bool { return v.ID == id && v.UserID == userID })
	if i < 0 {
		return account.ErrIdentityNotFound
	}
	f.list = slices.Delete(f.list, i, i+1)
	f.deleted = append(f.deleted, id)
	return nil
}

var ext = account.ExternalIdentity{Provider: "corp", Issuer: "https://id.example", Subject: "s1",
	Email: "new@corp.example", EmailVerified: true, FullName: "New Person"}

func TestIdentitySignIn(t *testing.T) {
	open := account.ProviderPolicy{SignUp: true, AllowedDomains: []string{"corp.example"}}
	client := account.Client{IP: "10.0.0.1"}
	for name, tc := range map[string]struct {
		ext    func(account.ExternalIdentity) account.ExternalIdentity
		policy account.ProviderPolicy
		taken  bool // the address belongs to an account
		want   error
	}{
		"signUpOff":  {policy: account.ProviderPolicy{}, want: account.ErrIdentityNotLinked},
		"unverified": {ext: func(e account.ExternalIdentity) account.ExternalIdentity { e.EmailVerified = false; return e }, policy: open, want: account.ErrIdentityUnverified},
		"noEmail":    {ext: func(e account.ExternalIdentity) account.ExternalIdentity { e.Email = ""; return e }, policy: open, want: account.ErrIdentityUnverified},
		"domain":     {ext: func(e account.ExternalIdentity) account.ExternalIdentity { e.Email = "x@evil.example"; return e }, policy: open, want: account.ErrIdentityDomain},
		"emailTaken": {policy: open, taken: true, want: account.ErrIdentityEmailTaken},
		"signUp":     {policy: open},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			ids := &identityStore{}
			x := account.NewIdentities(f.svc, ids)
			var created []account.User
			f.users.CreateFn = func(_ context.Context, u account.User) (account.User, error) {
				if tc.taken {
					return account.User{}, account.ErrEmailTaken
				}
				u.ID = "u-new"
				created = append(created, u)
				return u, nil
			}
			e := ext
			if tc.ext != nil {
				e = tc.ext(e)
			}
			secret, sess, u, err := x.SignIn(context.Background(), e, tc.policy, client)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if tc.want != nil {
				if secret != "" || len(ids.list) != 0 {
					t.Fatalf("refused, yet a session or an identity: %q %v", secret, ids.list)
				}
				if got := f.throttle.counted(); !slices.Contains(got, "address:10.0.0.1") {
					t.Fatalf("the refusal did not count against the address: %v", got)
				}
				return
			}
			if secret == "" || sess.UserID != "u-new" || u.Email != e.Email || !u.EmailVerified || u.Role != account.RoleUser || u.PasswordHash != "" || u.FullName != "New Person" {
				t.Fatalf("sign-up: %q %+v %+v", secret, sess, u)
			}
			if len(ids.list) != 1 || ids.list[0].UserID != "u-new" || ids.list[0].Provider != "corp" {
				t.Fatalf("identities %+v", ids.list)
			}
			if got := f.throttle.counted(); len(got) != 0 {
				t.Fatalf("a success counted: %v", got)
			}
		})
	}
}

// A linked identity signs its user in, whatever its address says now; an
// identity whose user is gone is removed and treated as new.
func TestIdentitySignInLinked(t *testing.T) {
	f := newFixture(t)
	ids := &identityStore{list: []account.Identity{{ID: "i1", UserID: "u1", Provider: "corp", Issuer: ext.Issuer, Subject: ext.Subject}}}
	x := account.NewIdentities(f.svc, ids)
	f.withUser(account.User{ID: "u1", Email: "owner@corp.example", Role: account.RoleUser})
	f.users.CreateFn = func(context.Context, account.User) (account.User, error) {
		t.Fatal("a linked identity created a user")
		return account.User{}, nil
	}
	e := ext
	e.Email, e.EmailVerified = "someone-else@evil.example", false
	_, sess, _, err := x.SignIn(context.Background(), e, account.ProviderPolicy{}, account.Client{})
	if err != nil || sess.UserID != "u1" || sess.TwoFactor {
		t.Fatalf("linked sign-in: %+v %v", sess, err)
	}
	e.MFA = true
	if _, sess, _, err := x.SignIn(context.Background(), e, account.ProviderPolicy{}, account.Client{}); err != nil || !sess.TwoFactor {
		t.Fatalf("an asserted second factor: %+v %v", sess, err)
	}

	f.withUser(account.User{ID: "u2"}) // u1 is gone
	if _, _, _, err := x.SignIn(context.Background(), ext, account.ProviderPolicy{}, account.Client{}); !errors.Is(err, account.ErrIdentityNotLinked) {
		t.Fatalf("stale identity: %v", err)
	}
	if !slices.Equal(ids.deleted, []string{"i1"}) {
		t.Fatalf("the stale identity was not removed: %v", ids.deleted)
	}
}

func TestIdentityLinkUnlink(t *testing.T) {
	f := newFixture(t)
	ids := &identityStore{}
	x := account.NewIdentities(f.svc, ids)
	f.withUser(account.User{ID: "u1", Email: "a@corp.example"}) // no password
	ctx := context.Background()
	me := account.Caller{UserID: "u1"}
	id, err := x.Link(ctx, me, ext)
	if err != nil || id.UserID != "u1" {
		t.Fatalf("Link: %+v %v", id, err)
	}
	if again, err := x.Link(ctx, me, ext); err != nil || again.ID != id.ID {
		t.Fatalf("Link again: %+v %v", again, err)
	}
	ids.list = append(ids.list, account.Identity{ID: "other", UserID: "u9", Issuer: "https://gh", Subject: "7"})
	if _, err := x.Link(ctx, me, account.ExternalIdentity{Issuer: "https://gh", Subject: "7"}); !errors.Is(err, account.ErrIdentityTaken) {
		t.Fatalf("linking another account's identity: %v", err)
	}
	if err := x.Unlink(ctx, me, "other"); !errors.Is(err, account.ErrIdentityNotFound) {
		t.Fatalf("unlinking another account's identity: %v", err)
	}
	// Passkeys are off in the fixture: no password, one identity.
	if err := x.Unlink(ctx, me, id.ID); !errors.Is(err, account.ErrLastSignInMethod) {
		t.Fatalf("unlinking the last way in: %v", err)
	}
	f.withUser(account.User{ID: "u1", Email: "a@corp.example", PasswordHash: "h"})
	if err := x.Unlink(ctx, me, id.ID); err != nil {
		t.Fatalf("unlink with a password: %v", err)
	}
}

// An administrator's invitation links the first sign-in with the provider
// whose verified address is the user's, even with sign-up off; an
// unverified address or another provider does not claim it.
func TestIdentityInvitation(t *testing.T) {
	f := newFixture(t)
	ids := &identityStore{}
	x := account.NewIdentities(f.svc, ids)
	f.withUser(account.User{ID: "u1", Email: "New@corp.example", PasswordHash: "h"})
	ctx := context.Background()
	inv, err := x.Invite(ctx, account.Caller{UserID: "admin"}, "u1", "corp")
	if err != nil || !inv.Pending || inv.Email != "new@corp.example" {
		t.Fatalf("Invite: %+v %v", inv, err)
	}
	if _, err := x.Invite(ctx, account.Caller{UserID: "admin"}, "u1", "corp"); !errors.Is(err, account.ErrIdentityTaken) {
		t.Fatalf("a second invitation: %v", err)
	}
	off := account.ProviderPolicy{}
	unverified := ext
	unverified.EmailVerified = false
	if _, _, _, err := x.SignIn(ctx, unverified, off, account.Client{}); !errors.Is(err, account.ErrIdentityNotLinked) {
		t.Fatalf("an unverified address claimed the invitation: %v", err)
	}
	other := ext
	other.Provider = "github"
	if _, _, _, err := x.SignIn(ctx, other, off, account.Client{}); !errors.Is(err, account.ErrIdentityNotLinked) {
		t.Fatalf("another provider claimed the invitation: %v", err)
	}
	_, sess, _, err := x.SignIn(ctx, ext, off, account.Client{})
	if err != nil || sess.UserID != "u1" {
		t.Fatalf("the invited sign-in: %+v %v", sess, err)
	}
	if len(ids.list) != 1 || ids.list[0].Pending || ids.list[0].Subject != ext.Subject {
		t.Fatalf("after the claim: %+v", ids.list)
	}
}

func TestEmailDomainAllowed(t *testing.T) {
	for _, tc := range []struct {
		email   string
		domains []string
		want    bool
	}{
		{"a@corp.example", nil, true},
		{"a@corp.example", []string{"corp.example"}, true},
		{"a@CORP.example", []string{" corp.example "}, true},
		{"a@sub.corp.example", []string{"corp.example"}, false},
		{"a@corp.example.evil", []string{"corp.example"}, false},
		{"corp.example", []string{"corp.example"}, false},
	} {
		if got := account.EmailDomainAllowed(tc.email, tc.domains); got != tc.want {
			t.Errorf("%q in %q: %v", tc.email, tc.domains, got)
		}
	}
}
