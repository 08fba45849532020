package httpapi

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/gofiber/fiber/v2"
)

// POST /signin {email, password}
func (a *API) signIn(c *fiber.Ctx) error {
	var body struct {
		Email    *string `json:"email"`
		Password *string `json:"password"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	if body.Email == nil {
		return web.FieldError("email", "missing_field", "email is required")
	}
	if body.Password == nil {
		return web.FieldError("password", "missing_field", "password is required")
	}
	cl := client(c)
	secret, sess, u, err := a.svc.SignIn(c.UserContext(), account.SignInInput{
		Email: *body.Email, Password: *body.Password, Client: cl,
	})
	var te *account.ThrottledError
	var mr *account.MFARequired
	ev := account.Event{Target: u.ID, TargetEmail: strings.Clone(*body.Email), Client: cl}
	switch {
	case errors.As(err, &mr):
		// The password was right: no session until the second factor.
		return c.Status(http.StatusAccepted).JSON(fiber.Map{
			"message": "second factor required", "mfaRequired": true,
			"challenge": mr.Challenge, "expiresAt": mr.ExpiresAt,
		})
	case err == nil:
		a.opts.Meter.SignIn(SignInOK)
		ev.Type, ev.Actor, ev.TargetEmail = account.EventSignIn, u.ID, u.Email
		ev.Detail = map[string]any{"session": sess.PublicID}
	case errors.Is(err, account.ErrInvalidCredentials):
		a.opts.Meter.SignIn(SignInFailed)
		ev.Type = account.EventSignInFailed
	case errors.As(err, &te):
		a.opts.Meter.SignIn(SignInThrottled)
		ev.Type = account.EventSignInThrottled
	case errors.Is(err, account.ErrEmailUnverified):
		ev.Type, ev.TargetEmail = account.EventSignInUnverified, u.Email
	}
	return a.signInAnswer(c, ev, err, secret, sess)
}

// signInAnswer ends every sign-in (password, second factor, passkey): the
// attempt's event is recorded when it was decided (ev.Type set), then the
// error, or the session cookie and "session created".
func (a *API) signInAnswer(c *fiber.Ctx, ev account.Event, err error, secret string, sess account.Session) error {
	if ev.Type != "" {
		a.svc.Record(c.UserContext(), ev)
	}
	if err != nil {
		return apiError(c, err)
	}
	a.setSessionCookie(c, secret, sess)
	return c.JSON(fiber.Map{"message": "session created"})
}

// GET /ms/me {sessionId}, for services: needs X-Service-Credential, no
// identity token. 200 {message, user, session:{id, expiresAt}}.
func (a *API) serviceMe(c *fiber.Ctx) error {
	if !a.validCredential(c.Get(ServiceCredentialHeader)) {
		return errServiceCredential
	}
	var body struct {
		SessionID *string `json:"sessionId"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	if body.SessionID == nil {
		return apiError(c, account.ErrInvalidSession)
	}
	u, sess, err := a.svc.Resolve(c.UserContext(), *body.SessionID)
	if err != nil {
		return apiError(c, err)
	}
	uj := toUserJSON(u)
	// An administrator who must enrol a second factor acts as a user
	// until they do (AUTH_MFA_REQUIRE_ADMIN).
	uj.RoleName = a.svc.EffectiveRole(u, sess.TwoFactor)
	return c.JSON(fiber.Map{
		"message": "user retrieved",
		"user":    uj,
		"session": fiber.Map{"id": sess.PublicID, "expiresAt": a.svc.ExpiresAt(sess)},
	})
}

// GET /me
func (a *API) me(c *fiber.Ctx) error {
	u, err := a.svc.Me(c.UserContext(), caller(c).UserID)
	if err != nil {
		return apiError(c, err)
	}
	uj := toUserJSON(u)
	// As /ms/me told the gateway, whose token carries the answer (it knows
	// how the session was opened).
	uj.RoleName = a.svc.EffectiveRole(u, web.Identity(c).Role == account.RoleAdmin)
	return c.JSON(fiber.Map{"message": "user retrieved", "user": uj})
}

// PATCH /me {avatarUrl, password:{old,new}, fullName, email, sector,
// currentPassword}: every property optional. An address change answers
// with the user unchanged and takes effect once confirmed by mail;
// currentPassword (or password.old), optional, spares the current
// address's confirmation.
func (a *API) patchMe(c *fiber.Ctx) error {
	var body struct {
		AvatarURL *string `json:"avatarUrl"`
		Password  *struct {
			Old *string `json:"old"`
			New *string `json:"new"`
		} `json:"password"`
		FullName        *string `json:"fullName"`
		Email           *string `json:"email"`
		Sector          *string `json:"sector"`
		CurrentPassword *string `json:"currentPassword"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	p := account.SelfPatch{Email: body.Email, FullName: body.FullName, Sector: body.Sector, AvatarURL: body.AvatarURL, CurrentPassword: body.CurrentPassword}
	if body.Password != nil {
		p.Password = &account.PasswordChange{Old: body.Password.Old, New: body.Password.New}
	}
	u, ns, err := a.svc.UpdateSelf(c.UserContext(), caller(c), p)
	if err != nil {
		return apiError(c, err)
	}
	if ns != nil {
		a.setSessionCookie(c, ns.Secret, ns.Session)
	}
	return c.JSON(fiber.Map{"message": "user edited", "user": toUserJSON(u)})
}

// DELETE /signout
func (a *API) signOut(c *fiber.Ctx) error {
	cl := caller(c)
	err := a.svc.SignOut(c.UserContext(), cl)
	if err != nil && !errors.Is(err, account.ErrSessionNotFound) {
		return apiError(c, err)
	}
	a.svc.Record(c.UserContext(), account.Event{Type: account.EventSignOut, Actor: cl.UserID, Target: cl.UserID, Client: cl.Client, Detail: map[string]any{"session": cl.SessionID}})
	// Signing out of a session that has already ended still clears the
	// cookie and succeeds: the caller's goal is reached.
	a.clearSessionCookie(c)
	return c.JSON(fiber.Map{"message": "signed out"})
}

type sessionJSON struct {
	ID         string    `json:"id"`
	CreatedAt  time.Time `json:"createdAt"`
	LastSeenAt time.Time `json:"lastSeenAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	UserAgent  string    `json:"userAgent"`
	IP         string    `json:"ip"`
	Current    bool      `json:"current"`
}

// GET /me/sessions
func (a *API) listSessions(c *fiber.Ctx) error {
	cl := caller(c)
	list, err := a.svc.Sessions(c.UserContext(), cl.UserID)
	if err != nil {
		return apiError(c, err)
	}
	out := make([]sessionJSON, 0, len(list))
	for _, s := range list {
		out = append(out, sessionJSON{
			ID: s.PublicID, CreatedAt: s.CreatedAt, LastSeenAt: s.LastSeenAt, ExpiresAt: a.svc.ExpiresAt(s),
			UserAgent: s.UserAgent, IP: s.IP, Current: s.PublicID == cl.SessionID,
		})
	}
	return c.JSON(fiber.Map{"sessions": out})
}

// DELETE /me/sessions/:id
func (a *API) endSession(c *fiber.Ctx) error {
	cl := caller(c)
	id := strings.Clone(c.Params("id"))
	if err := a.svc.EndSession(c.UserContext(), cl.UserID, id); err != nil {
		return apiError(c, err)
	}
	a.svc.Record(c.UserContext(), account.Event{Type: account.EventSessionEnded, Actor: cl.UserID, Target: cl.UserID, Client: cl.Client, Detail: map[string]any{"session": id}})
	if id == cl.SessionID {
		a.clearSessionCookie(c)
	}
	return c.JSON(fiber.Map{"message": "session ended"})
}

// DELETE /me/sessions: every session but the current one.
func (a *API) endOtherSessions(c *fiber.Ctx) error {
	cl := caller(c)
	n, err := a.svc.EndOtherSessions(c.UserContext(), cl)
	if err != nil {
		return apiError(c, err)
	}
	a.svc.Record(c.UserContext(), account.Event{Type: account.EventSessionEnded, Actor: cl.UserID, Target: cl.UserID, Client: cl.Client, Detail: map[string]any{"others": n}})
	return c.JSON(fiber.Map{"message": "other sessions ended", "ended": n})
}

// POST /users (admin)
func (a *API) createUser(c *fiber.Ctx) error {
	var body struct {
		Email     *string `json:"email"`
		Password  *string `json:"password"`
		FullName  *string `json:"fullName"`
		EDV       *string `json:"edv"`
		Sector    *string `json:"sector"`
		AvatarURL *string `json:"avatarUrl"`
		RoleName  *string `json:"roleName"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"email", body.Email}, {"password", body.Password}, {"fullName", body.FullName}, {"edv", body.EDV}} {
		if f.v == nil {
			return web.FieldError(f.name, "missing_field", f.name+" is required")
		}
	}
	in := account.NewUserInput{
		Email: *body.Email, Password: *body.Password, FullName: *body.FullName, EDV: *body.EDV,
		Sector: body.Sector, AvatarURL: body.AvatarURL,
	}
	if body.RoleName != nil {
		in.Role = *body.RoleName
		if in.Role == "" {
			return web.FieldError("roleName", "invalid_role", `roleName must be "user" or "admin"`)
		}
	}
	u, err := a.svc.CreateUser(c.UserContext(), in)
	if err != nil {
		return apiError(c, err)
	}
	cl := caller(c)
	a.svc.Record(c.UserContext(), account.Event{Type: account.EventUserCreated, Actor: cl.UserID, Target: u.ID, TargetEmail: u.Email, Client: cl.Client, Detail: map[string]any{"roleName": u.Role}})
	return c.Status(http.StatusCreated).JSON(fiber.Map{"message": "user created", "user": toUserJSON(u)})
}

// GET /users?page=1&limit=50 (admin)
func (a *API) listUsers(c *fiber.Ctx) error {
	page, err := queryInt(c, "page", 1)
	if err != nil {
		return err
	}
	limit, err := queryInt(c, "limit", 50)
	if err != nil {
		return err
	}
	users, total, err := a.svc.ListUsers(c.UserContext(), page, limit)
	if err != nil {
		return apiError(c, err)
	}
	out := make([]userJSON, 0, len(users))
	for _, u := range users {
		out = append(out, toUserJSON(u))
	}
	return c.JSON(fiber.Map{"users": out, "page": page, "limit": limit, "total": total})
}

func queryInt(c *fiber.Ctx, name string, def int) (int, error) {
	s := c.Query(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, web.FieldError(name, "invalid_value", name+" must be a whole number")
	}
	return n, nil
}

// GET /users/:id (admin)
func (a *API) getUser(c *fiber.Ctx) error {
	u, err := a.svc.User(c.UserContext(), strings.Clone(c.Params("id")))
	if err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"message": "user retrieved", "user": toUserJSON(u)})
}

// PATCH /users/:id (admin) {fullName, email, sector, edv, avatarUrl, roleName, password:{new}}
func (a *API) patchUser(c *fiber.Ctx) error {
	var body struct {
		FullName  *string `json:"fullName"`
		Email     *string `json:"email"`
		Sector    *string `json:"sector"`
		EDV       *string `json:"edv"`
		AvatarURL *string `json:"avatarUrl"`
		RoleName  *string `json:"roleName"`
		Password  *struct {
			New *string `json:"new"`
		} `json:"password"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	p := account.AdminPatch{
		Email: body.Email, FullName: body.FullName, Sector: body.Sector, EDV: body.EDV,
		AvatarURL: body.AvatarURL, Role: body.RoleName,
	}
	if body.Password != nil {
		if body.Password.New == nil {
			return web.FieldError("password.new", "missing_field", "password.new is required")
		}
		p.NewPassword = body.Password.New
	}
	cl := caller(c)
	u, err := a.svc.UpdateUser(c.UserContext(), cl.UserID, strings.Clone(c.Params("id")), p)
	if err != nil {
		return apiError(c, err)
	}
	// Which properties changed, never their values (a password among them).
	var changed []string
	for name, set := range map[string]bool{"email": p.Email != nil, "fullName": p.FullName != nil, "sector": p.Sector != nil,
		"edv": p.EDV != nil, "avatarUrl": p.AvatarURL != nil, "roleName": p.Role != nil, "password": p.NewPassword != nil} {
		if set {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	detail := map[string]any{"changed": changed}
	if p.Role != nil {
		detail["roleName"] = u.Role
	}
	a.svc.Record(c.UserContext(), account.Event{Type: account.EventUserChanged, Actor: cl.UserID, Target: u.ID, TargetEmail: u.Email, Client: cl.Client, Detail: detail})
	return c.JSON(fiber.Map{"message": "user edited", "user": toUserJSON(u)})
}

// DELETE /users/:id (admin)
func (a *API) deleteUser(c *fiber.Ctx) error {
	cl := caller(c)
	id := strings.Clone(c.Params("id"))
	if err := a.svc.DeleteUser(c.UserContext(), cl.UserID, id); err != nil {
		return apiError(c, err)
	}
	a.svc.Record(c.UserContext(), account.Event{Type: account.EventUserDeleted, Actor: cl.UserID, Target: id, Client: cl.Client})
	return c.JSON(fiber.Map{"message": "user deleted"})
}
