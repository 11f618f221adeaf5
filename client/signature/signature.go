// Package signature signs and verifies eventgate's webhook notifications:
// the Eventgate-Signature header is "v1=" and the hex HMAC-SHA256, keyed
// with the rule's secret, of the Eventgate-Timestamp header (Unix
// seconds), a '.', and the raw body. A receiver calls Verify with the
// headers and the body as received, and deduplicates by Eventgate-Id
// (delivery is at least once).
//
// This package owns the scheme; the gateway's delivery (internal/notify)
// signs with it.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Headers of a webhook delivery.
const (
	HeaderID        = "Eventgate-Id"
	HeaderTimestamp = "Eventgate-Timestamp"
	HeaderSignature = "Eventgate-Signature"
)

// Sign returns the Eventgate-Signature of body sent at ts: "v1=" and the
// hex HMAC-SHA256, keyed with the secret, of the timestamp (Unix seconds),
// a '.', and the body.
func Sign(secret []byte, ts int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(strconv.FormatInt(ts, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// Errors of Verify.
var (
	ErrBadSignature = errors.New("signature does not match")
	ErrStale        = errors.New("timestamp outside the tolerance")
)

// Verify checks a webhook delivery as a receiver should: the signature
// header (several comma-separated "v1=" values are allowed, for a secret
// being rotated) over the timestamp header and the raw body, and the
// timestamp within tolerance of now, so that a captured delivery cannot be
// replayed later.
func Verify(secret []byte, timestamp, signature string, body []byte, tolerance time.Duration, now time.Time) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: bad timestamp %q", ErrBadSignature, timestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s", ErrStale, d)
	}
	want := Sign(secret, ts, body)
	for _, s := range strings.Split(signature, ",") {
		if hmac.Equal([]byte(strings.TrimSpace(s)), []byte(want)) {
			return nil
		}
	}
	return ErrBadSignature
}
