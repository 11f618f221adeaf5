package clickhouse

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/eventgate/eventgate/internal/query"
)

const tokenVersion = 1

// pageToken is the opaque continuation: base64url of this JSON.
type pageToken struct {
	V          int    `json:"v"`
	RV         uint64 `json:"rv"`
	TimeUS     int64  `json:"t"`
	UID        string `json:"u"`
	TenantType string `json:"tt,omitempty"`
	TenantName string `json:"tn,omitempty"`
	Hash       string `json:"h"`
}

func encodeToken(t *pageToken) string {
	b, err := json.Marshal(t)
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(s string) (*pageToken, error) {
	if len(s) > 4096 {
		return nil, query.ErrBadPageToken
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return nil, query.ErrBadPageToken
	}
	var t pageToken
	if err := json.Unmarshal(b, &t); err != nil || t.V != tokenVersion {
		return nil, query.ErrBadPageToken
	}
	return &t, nil
}

// filterHash identifies the filter and order a token was issued for: a
// SHA-256 of an unambiguous (length-prefixed) encoding, first 64 bits.
func filterHash(f query.Filter, oldestFirst bool) string {
	h := sha256.New()
	var buf [binary.MaxVarintLen64]byte
	num := func(v int64) { h.Write(buf[:binary.PutVarint(buf[:], v)]) }
	str := func(s string) { num(int64(len(s))); h.Write([]byte(s)) }
	strs := func(ss []string) {
		num(int64(len(ss)))
		for _, s := range ss {
			str(s)
		}
	}
	sets := func(ss []query.StringSet) {
		for _, s := range ss {
			strs(s.In)
			strs(s.NotIn)
		}
	}
	tm := func(t time.Time) {
		if t.IsZero() {
			num(0)
			return
		}
		num(1)
		num(t.Unix())
		num(int64(t.Nanosecond()))
	}
	str("eventgate.clickhouse.filter.v1")
	if oldestFirst {
		num(1)
	} else {
		num(0)
	}
	if f.Tenant != nil {
		num(1)
		str(f.Tenant.Type)
		str(f.Tenant.Name)
	} else {
		num(0)
	}
	sets(f.Sets())
	sets(f.Regarding.Sets())
	sets(f.Related.Sets())
	if f.Involving != nil {
		num(1)
		sets(f.Involving.Sets())
	} else {
		num(0)
	}
	num(int64(len(f.Labels)))
	for _, l := range f.Labels {
		str(l.Key)
		str(l.Op)
		strs(l.Values)
	}
	tm(f.Since)
	tm(f.Until)
	sum := h.Sum(nil)
	return strconv.FormatUint(binary.BigEndian.Uint64(sum[:8]), 36)
}
