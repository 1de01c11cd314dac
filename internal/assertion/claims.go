package assertion

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// The registered claims (iss, sub, aud, iat, exp, nbf, jti) of assertions
// and direct tokens are made and checked here, once for both: the two
// differ only in their issuer and how long they may live (tokenKind). What
// each carries besides (identity, verbs) and the replay cache are their own.

// tokenKind is what the claims of one kind of token are checked against.
type tokenKind struct {
	issuer      string
	maxLifetime time.Duration
	// wrongIssuer is the refusal of a token of another kind.
	wrongIssuer string
}

var (
	assertionToken = tokenKind{issuer: Issuer, maxLifetime: MaxLifetime, wrongIssuer: "wrong issuer"}
	directToken    = tokenKind{issuer: DirectIssuer, maxLifetime: MaxDirectLifetime, wrongIssuer: "not a direct token"}
)

// maxTokenSize bounds a token before it is parsed.
const maxTokenSize = 64 << 10

// sign returns a compact JWS, signed by s, of kind's issuer, id's user as
// subject, audience, iat and exp, a new random 128-bit jti (also returned)
// and the private claims priv (made from id filtered).
func (s *Signer) sign(kind tokenKind, id Identity, audience string, iat, exp time.Time, priv any) (raw, jti string, err error) {
	if id.User == "" {
		return "", "", errors.New("assertion: no user name")
	}
	if audience == "" {
		return "", "", errors.New("assertion: no audience")
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("assertion: %w", err)
	}
	jti = hex.EncodeToString(b[:])
	std := jwt.Claims{
		Issuer:   kind.issuer,
		Subject:  id.User,
		Audience: jwt.Audience{audience},
		IssuedAt: jwt.NewNumericDate(iat),
		Expiry:   jwt.NewNumericDate(exp),
		ID:       jti,
	}
	raw, err = jwt.Signed(s.signer).Claims(std).Claims(priv).Serialize()
	if err != nil {
		return "", "", err
	}
	return raw, jti, nil
}

// checkClaims verifies token's signature and registered claims for kind
// and audience at now, and decodes its private claims into priv. It
// refuses (an error wrapping ErrInvalid; ErrUnknownKey for an unknown kid)
// a token that is not a compact JWS with exactly one EdDSA signature by a
// key of the set, not of kind's issuer, not for exactly audience, without a
// subject, jti, iat or exp, living longer than kind allows, issued in the
// future, expired or not yet valid (Skew tolerated on the last three).
// The returned claims have IssuedAt and Expiry set.
func (v *Verifier) checkClaims(token string, kind tokenKind, audience string, now time.Time, priv any) (jwt.Claims, error) {
	if token == "" {
		return jwt.Claims{}, refuse("missing")
	}
	if len(token) > maxTokenSize {
		return jwt.Claims{}, refuse("too large")
	}
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{Algorithm})
	if err != nil {
		return jwt.Claims{}, refuse("not a compact JWS with alg EdDSA")
	}
	if len(tok.Headers) != 1 || tok.Headers[0].Algorithm != string(Algorithm) {
		return jwt.Claims{}, refuse("not exactly one EdDSA signature")
	}
	key, ok := v.Keys().Key(tok.Headers[0].KeyID)
	if !ok {
		return jwt.Claims{}, ErrUnknownKey
	}
	var std jwt.Claims
	if err := tok.Claims(key, &std, priv); err != nil {
		return jwt.Claims{}, refuse("bad signature or claims")
	}
	switch {
	case std.Issuer != kind.issuer:
		return jwt.Claims{}, refuse(kind.wrongIssuer)
	case len(std.Audience) != 1 || std.Audience[0] != audience:
		return jwt.Claims{}, refuse("wrong audience")
	case std.Subject == "":
		return jwt.Claims{}, refuse("no subject")
	case std.ID == "" || len(std.ID) > 128:
		return jwt.Claims{}, refuse("no jti")
	case std.IssuedAt == nil || std.Expiry == nil:
		return jwt.Claims{}, refuse("no iat or exp")
	}
	iat, exp := std.IssuedAt.Time(), std.Expiry.Time()
	switch {
	case !exp.After(iat):
		return jwt.Claims{}, refuse("exp not after iat")
	case exp.Sub(iat) > kind.maxLifetime:
		return jwt.Claims{}, refuse("lifetime too long")
	case iat.After(now.Add(Skew)):
		return jwt.Claims{}, refuse("issued in the future")
	case !now.Before(exp.Add(Skew)):
		return jwt.Claims{}, refuse("expired")
	case std.NotBefore != nil && std.NotBefore.Time().After(now.Add(Skew)):
		return jwt.Claims{}, refuse("not yet valid")
	}
	return std, nil
}
