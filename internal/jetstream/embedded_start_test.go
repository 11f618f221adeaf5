package jetstream

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedServerOnATakenAddressSaysWhyAtOnce: an embedded server
// whose listen address is taken fails at once with the listener's error,
// not after the start timeout with no reason.
func TestEmbeddedServerOnATakenAddressSaysWhyAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	ns, err := Embedded(t.TempDir(), l.Addr().String())
	if err == nil {
		ns.Shutdown()
		t.Fatalf("the server started on %s, which is taken", l.Addr())
	}
	if !errors.Is(err, ErrListen) || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Errorf("error %q, want the listener's (address already in use, %s)", err, l.Addr())
	}
	if took := time.Since(start); took >= embeddedReadyTimeout {
		t.Errorf("failed after %v, want at once (the timeout is %v)", took, embeddedReadyTimeout)
	}
}
