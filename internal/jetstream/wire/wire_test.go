package wire

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSeriesMinutesRoundTrip(t *testing.T) {
	m0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	u := m0.Unix() / 60
	got, err := ParseMinutes(fmt.Sprintf("%d=2, %d=1,%d=3,%d=0", u+1, u, u+1, u+5))
	want := []Minute{{m0, 1}, {m0.Add(time.Minute), 5}}
	if err != nil || !cmp.Equal(want, got) {
		t.Fatalf("got %v %v, want %v", got, err, want)
	}
	if s := FormatMinutes(want); s != fmt.Sprintf("%d=1,%d=5", u, u+1) {
		t.Errorf("format: %s", s)
	}
	if got, err := ParseMinutes(""); got != nil || err != nil {
		t.Errorf("empty: %v %v", got, err)
	}
	if FormatMinutes(nil) != "" {
		t.Error("FormatMinutes(nil) is not empty")
	}
}

func TestParseMinutesRefusesMalformedValues(t *testing.T) {
	for _, bad := range []string{"x", "1=", "=1", "a=1", "1=b", "-1=1", "1=-1", "1=99999999999", "99999999999999=1"} {
		if _, err := ParseMinutes(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
