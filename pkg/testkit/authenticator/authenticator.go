// Package authenticator is a software WebAuthn authenticator for tests: it
// answers the publicKey options of navigator.credentials.create and .get
// (as a relying party's API sends them, JSON with base64url binaries) with
// the PublicKeyCredential JSON a browser would send back, holding
// discoverable ES256 credentials with user verification and "none"
// attestation. Tests use it where no browser runs (API-level ceremonies),
// and to forge what a browser never would: another origin, a replayed or
// rewound sign count.
package authenticator

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Credential is one key pair the authenticator holds. Count is its
// signature counter, advanced by every assertion.
type Credential struct {
	ID         []byte
	RPID       string
	UserHandle []byte
	Key        *ecdsa.PrivateKey
	Count      uint32
}

// Authenticator holds credentials and answers ceremonies for Origin (the
// origin the "browser" puts in the client data).
type Authenticator struct {
	Origin string
	Creds  []*Credential
}

// New returns an empty authenticator for origin.
func New(origin string) *Authenticator { return &Authenticator{Origin: origin} }

var b64 = base64.RawURLEncoding

type creationOptions struct {
	Challenge string `json:"challenge"`
	RP        struct {
		ID string `json:"id"`
	} `json:"rp"`
	User struct {
		ID string `json:"id"`
	} `json:"user"`
	ExcludeCredentials []struct {
		ID string `json:"id"`
	} `json:"excludeCredentials"`
}

type requestOptions struct {
	Challenge        string `json:"challenge"`
	RPID             string `json:"rpId"`
	AllowCredentials []struct {
		ID string `json:"id"`
	} `json:"allowCredentials"`
}

// Create makes a credential for the options of a registration (the
// publicKey member) and returns the PublicKeyCredential JSON.
func (a *Authenticator) Create(options []byte) ([]byte, error) {
	var o creationOptions
	if err := json.Unmarshal(options, &o); err != nil {
		return nil, err
	}
	if o.Challenge == "" || o.RP.ID == "" || o.User.ID == "" {
		return nil, errors.New("creation options without challenge, rp.id or user.id")
	}
	handle, err := b64.DecodeString(o.User.ID)
	if err != nil {
		return nil, fmt.Errorf("user.id: %w", err)
	}
	for _, ex := range o.ExcludeCredentials {
		for _, c := range a.Creds {
			if ex.ID == b64.EncodeToString(c.ID) {
				return nil, errors.New("InvalidStateError: a credential of this authenticator is excluded")
			}
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 32)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	c := &Credential{ID: id, RPID: o.RP.ID, UserHandle: handle, Key: key}
	clientData := a.clientData("webauthn.create", o.Challenge)

	pub, err := key.PublicKey.ECDH()
	if err != nil {
		return nil, err
	}
	point := pub.Bytes() // 0x04 | X | Y
	var cose []byte
	cose = append(cose, 0xa5)                   // map(5)
	cose = append(cose, 0x01, 0x02)             // kty: EC2
	cose = append(cose, 0x03, 0x26)             // alg: -7 (ES256)
	cose = append(cose, 0x20, 0x01)             // crv: P-256
	cose = append(cose, 0x21, 0x58, 32)         // x
	cose = append(cose, point[1:33]...)         //
	cose = append(cose, 0x22, 0x58, 32)         // y
	cose = append(cose, point[33:65]...)        //
	auth := authData(c.RPID, 0x01|0x04|0x40, 0) // UP, UV, AT
	auth = append(auth, make([]byte, 16)...)    // AAGUID: none
	auth = binary.BigEndian.AppendUint16(auth, uint16(len(id)))
	auth = append(auth, id...)
	auth = append(auth, cose...)

	var att []byte
	att = append(att, 0xa3)
	att = cborText(att, "fmt")
	att = cborText(att, "none")
	att = cborText(att, "attStmt")
	att = append(att, 0xa0) // {}
	att = cborText(att, "authData")
	att = cborBytes(att, auth)

	a.Creds = append(a.Creds, c)
	return json.Marshal(map[string]any{
		"id": b64.EncodeToString(id), "rawId": b64.EncodeToString(id), "type": "public-key",
		"response": map[string]any{
			"clientDataJSON":    b64.EncodeToString(clientData),
			"attestationObject": b64.EncodeToString(att),
			"transports":        []string{"internal"},
		},
		"clientExtensionResults":  map[string]any{},
		"authenticatorAttachment": "platform",
	})
}

// Get signs the options of a sign-in (the publicKey member) with the
// newest credential for their relying party (among allowCredentials, if
// listed) and returns the PublicKeyCredential JSON.
func (a *Authenticator) Get(options []byte) ([]byte, error) {
	var o requestOptions
	if err := json.Unmarshal(options, &o); err != nil {
		return nil, err
	}
	if o.Challenge == "" || o.RPID == "" {
		return nil, errors.New("request options without challenge or rpId")
	}
	var c *Credential
	for i := len(a.Creds) - 1; i >= 0 && c == nil; i-- {
		cand := a.Creds[i]
		if cand.RPID != o.RPID {
			continue
		}
		if len(o.AllowCredentials) == 0 {
			c = cand
		}
		for _, al := range o.AllowCredentials {
			if al.ID == b64.EncodeToString(cand.ID) {
				c = cand
			}
		}
	}
	if c == nil {
		return nil, errors.New("NotAllowedError: no credential for this relying party")
	}
	return a.Sign(c, o.Challenge)
}

// Sign answers challenge with c (advancing its counter), whatever the
// options said: tests use it to present a removed or foreign credential.
func (a *Authenticator) Sign(c *Credential, challenge string) ([]byte, error) {
	c.Count++
	clientData := a.clientData("webauthn.get", challenge)
	auth := authData(c.RPID, 0x01|0x04, c.Count) // UP, UV
	sum := sha256.Sum256(clientData)
	digest := sha256.Sum256(append(append([]byte{}, auth...), sum[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, c.Key, digest[:])
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{
		"id": b64.EncodeToString(c.ID), "rawId": b64.EncodeToString(c.ID), "type": "public-key",
		"response": map[string]any{
			"clientDataJSON":    b64.EncodeToString(clientData),
			"authenticatorData": b64.EncodeToString(auth),
			"signature":         b64.EncodeToString(sig),
			"userHandle":        b64.EncodeToString(c.UserHandle),
		},
		"clientExtensionResults":  map[string]any{},
		"authenticatorAttachment": "platform",
	})
}

func (a *Authenticator) clientData(typ, challenge string) []byte {
	b, _ := json.Marshal(map[string]any{"type": typ, "challenge": challenge, "origin": a.Origin, "crossOrigin": false})
	return b
}

// authData is rpIdHash | flags | signCount.
func authData(rpID string, flags byte, count uint32) []byte {
	h := sha256.Sum256([]byte(rpID))
	out := append(h[:], flags)
	return binary.BigEndian.AppendUint32(out, count)
}

func cborHead(b []byte, major byte, n int) []byte {
	switch {
	case n < 24:
		return append(b, major<<5|byte(n))
	case n < 256:
		return append(b, major<<5|24, byte(n))
	default:
		return binary.BigEndian.AppendUint16(append(b, major<<5|25), uint16(n))
	}
}

func cborText(b []byte, s string) []byte  { return append(cborHead(b, 3, len(s)), s...) }
func cborBytes(b []byte, p []byte) []byte { return append(cborHead(b, 2, len(p)), p...) }
