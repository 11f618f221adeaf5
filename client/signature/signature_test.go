package signature

import (
	"fmt"
	"testing"
	"time"
)

const secret = "0123456789abcdef-secret"

func TestVerifyRefusesTamperedAndStaleDeliveries(t *testing.T) {
	body := []byte(`{"id":"x"}`)
	now := time.Unix(1_700_000_000, 0)
	sig := Sign([]byte(secret), now.Unix(), body)
	ts := fmt.Sprint(now.Unix())
	if err := Verify([]byte(secret), ts, sig, body, 5*time.Minute, now.Add(time.Minute)); err != nil {
		t.Errorf("genuine delivery refused: %v", err)
	}
	if err := Verify([]byte(secret), ts, sig, []byte(`{"id":"y"}`), 5*time.Minute, now); err == nil {
		t.Error("tampered body accepted")
	}
	if err := Verify([]byte(secret), ts, sig, body, 5*time.Minute, now.Add(6*time.Minute)); err == nil {
		t.Error("replayed stale delivery accepted")
	}
	if err := Verify([]byte("another-secret-0000"), ts, sig, body, 5*time.Minute, now); err == nil {
		t.Error("delivery signed with another secret accepted")
	}
}
