package service

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/limits"
	"github.com/eventgate/eventgate/internal/query"
)

func TestQueryWindow(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 123456789, time.UTC)
	l := limits.Limits{QueryWindow: time.Hour, MaxQueryWindow: 2 * time.Hour}

	var q query.List
	wrap, err := queryWindow(&q, l, now)
	if err != nil {
		t.Fatal(err)
	}
	wantSince := now.Add(-time.Hour).Truncate(time.Microsecond)
	if !q.Filter.Since.Equal(wantSince) {
		t.Errorf("default since %v, want %v", q.Filter.Since, wantSince)
	}
	tok := wrap("inner")
	if wrap("") != "" || !strings.HasSuffix(tok, ".inner") {
		t.Fatalf("wrapped token %q", tok)
	}
	// The next page, later, reads the same window.
	next := query.List{PageToken: tok}
	wrap2, err := queryWindow(&next, l, now.Add(time.Minute))
	if err != nil || !next.Filter.Since.Equal(wantSince) || next.PageToken != "inner" || wrap2("i2") != strings.TrimSuffix(tok, "inner")+"i2" {
		t.Errorf("next page: since %v token %q (%v), want the first page's window", next.Filter.Since, next.PageToken, err)
	}
	// A token of a listing with its own window passes through.
	own := query.List{PageToken: "plain"}
	own.Filter.Since = now.Add(-30 * time.Minute)
	if w, err := queryWindow(&own, l, now); err != nil || own.PageToken != "plain" || w("x") != "x" {
		t.Errorf("own window: %q %v", own.PageToken, err)
	}
	bad := query.List{PageToken: "!!.inner"}
	if _, err := queryWindow(&bad, l, now); !errors.Is(err, query.ErrBadPageToken) {
		t.Errorf("bad window prefix: %v", err)
	}

	var long query.List
	long.Filter.Since, long.Filter.Until = now.Add(-5*time.Hour), now.Add(-time.Hour)
	var inv *InvalidError
	if _, err := queryWindow(&long, l, now); !errors.As(err, &inv) || inv.Violations[0].Field != "since" || !strings.Contains(err.Error(), "maxQueryWindow") {
		t.Errorf("4 h window: %v, want since naming maxQueryWindow", err)
	}
	var open query.List
	if _, err := queryWindow(&open, limits.Limits{MaxQueryWindow: time.Hour}, now); !errors.As(err, &inv) || !strings.Contains(err.Error(), "is required") {
		t.Errorf("no default window, a maximum, no since: %v, want since required", err)
	}
	var none query.List
	if _, err := queryWindow(&none, limits.Limits{}, now); err != nil || !none.Filter.Since.IsZero() {
		t.Errorf("no limits: since %v, %v", none.Filter.Since, err)
	}
}
