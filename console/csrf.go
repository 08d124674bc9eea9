package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strconv"
	"time"
)

// A form's token is stateless: the expiry and an HMAC-SHA256, under the
// key, of the route the form posts to and that expiry. Nothing is kept, so
// any instance with the key checks it; a token serves the one route it was
// issued for, until it expires.

// csrfField is the form field that carries the token.
const csrfField = "csrf"

// csrfDomain separates these MACs from anything else the key might sign.
const csrfDomain = "baton/console csrf v1"

var (
	errNoToken      = errors.New("the form carries no token")
	errBadToken     = errors.New("the form's token was not issued by this console for this action")
	errExpiredToken = errors.New("the form's token has expired")
)

type signer struct {
	key []byte
	ttl time.Duration
}

func (s signer) mac(action string, expiry int64) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(csrfDomain + "\n" + action + "\n" + strconv.FormatInt(expiry, 10)))
	return m.Sum(nil)
}

// issue returns a token for action (the route posted to, such as
// "/requeue"), valid until now + ttl.
func (s signer) issue(action string, now time.Time) string {
	expiry := now.Add(s.ttl).Unix()
	b := binary.BigEndian.AppendUint64(nil, uint64(expiry))
	return base64.RawURLEncoding.EncodeToString(append(b, s.mac(action, expiry)...))
}

// check accepts a token issued for action that has not expired at now.
func (s signer) check(token, action string, now time.Time) error {
	if token == "" {
		return errNoToken
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) != 8+sha256.Size {
		return errBadToken
	}
	expiry := int64(binary.BigEndian.Uint64(b[:8]))
	if !hmac.Equal(b[8:], s.mac(action, expiry)) {
		return errBadToken
	}
	if now.Unix() >= expiry {
		return errExpiredToken
	}
	return nil
}
