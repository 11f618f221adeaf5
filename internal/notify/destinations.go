package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"syscall"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"

	"github.com/eventgate/eventgate/client/signature"
	"github.com/eventgate/eventgate/internal/notify/delivery"
	"github.com/eventgate/eventgate/internal/rules"
)

// CloudEvents attributes of a notification.
const (
	// CETypePrefix + the state ("firing", "renotify", "resolved").
	CETypePrefix = "io.eventgate.rule."
	// CESourcePrefix + tenant type/name/rule (the name path-escaped).
	CESourcePrefix = "/eventgate/rules/"
)

// outcome is one attempt's result.
type outcome struct {
	code int
	err  error
}

// sender sends notifications to destinations.
type sender struct {
	http *http.Client
	ce   cloudevents.Client
	nc   *nats.Conn
}

func newSender(timeout time.Duration, denyPrivate bool, nc *nats.Conn) (*sender, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Many rules may post to one host (a team's receiver, Slack), one
	// attempt at a time each: keep as many of their connections as the
	// pool holds, not 2 a host (http.DefaultMaxIdleConnsPerHost), which
	// opened and closed a connection for every notification beyond the
	// second at a time.
	tr.MaxIdleConnsPerHost = tr.MaxIdleConns
	if denyPrivate {
		d := &net.Dialer{Timeout: timeout, Control: refusePrivate}
		tr.DialContext = d.DialContext
		tr.Proxy = nil // a proxy would dial the private address for us
	}
	hc := &http.Client{Timeout: timeout, Transport: tr}
	p, err := cloudevents.NewHTTP(cehttp.WithClient(*hc))
	if err != nil {
		return nil, fmt.Errorf("cloudevents protocol: %w", err)
	}
	ce, err := cloudevents.NewClient(p)
	if err != nil {
		return nil, fmt.Errorf("cloudevents client: %w", err)
	}
	return &sender{http: hc, ce: ce, nc: nc}, nil
}

// send makes one attempt at delivering n (body is its JSON) to d.
func (s *sender) send(ctx context.Context, d rules.Destination, n *rules.Notification, body []byte) outcome {
	switch d.Kind {
	case rules.DestWebhook:
		ts := time.Now().Unix()
		return s.post(ctx, d.URL, body, map[string]string{
			signature.HeaderID:        n.ID,
			signature.HeaderTimestamp: strconv.FormatInt(ts, 10),
			signature.HeaderSignature: signature.Sign([]byte(d.Secret), ts, body),
		})
	case rules.DestSlack:
		b, _ := json.Marshal(map[string]string{"text": n.Message})
		return s.post(ctx, d.URL, b, nil)
	case rules.DestCloudEvents:
		return s.cloudEvent(ctx, d, n)
	case rules.DestNATS:
		msg := nats.NewMsg(d.Subject)
		msg.Data = body
		msg.Header.Set(nats.MsgIdHdr, n.ID)
		if err := s.nc.PublishMsg(msg); err != nil {
			return outcome{err: err}
		}
		return outcome{err: s.nc.FlushWithContext(ctx)}
	}
	return outcome{err: fmt.Errorf("unknown destination %q", d.Kind)}
}

func (s *sender) post(ctx context.Context, u string, body []byte, headers map[string]string) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return outcome{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "eventgate-notify")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return outcome{err: redactURL(err)}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return outcome{code: resp.StatusCode, err: fmt.Errorf("HTTP %d", resp.StatusCode)}
	}
	return outcome{code: resp.StatusCode}
}

// redactURL keeps a URL's secrets (a Slack token in the path, a query
// string) out of errors, which the delivery log shows.
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, delivery.RedactedURL(ue.URL), ue.Err)
	}
	return err
}

// CloudEvent is the CloudEvent of a notification: id the notification's
// id, source the rule, type the state, subject the regarding object, the
// notification as JSON data.
func CloudEvent(n *rules.Notification) (cloudevents.Event, error) {
	ev := cloudevents.NewEvent()
	ev.SetID(n.ID)
	ev.SetSource(CESourcePrefix + url.PathEscape(n.Tenant.Type) + "/" + url.PathEscape(n.Tenant.Name) + "/" + url.PathEscape(ruleName(n)))
	ev.SetType(CETypePrefix + n.State)
	ev.SetTime(n.Time)
	if subj := n.Group["regarding"]; subj != "" {
		ev.SetSubject(subj)
	}
	if err := ev.SetData(cloudevents.ApplicationJSON, n); err != nil {
		return ev, err
	}
	return ev, ev.Validate()
}

func ruleName(n *rules.Notification) string {
	for i := len(n.Rule) - 1; i >= 0; i-- {
		if n.Rule[i] == '/' {
			return n.Rule[i+1:]
		}
	}
	return n.Rule
}

func (s *sender) cloudEvent(ctx context.Context, d rules.Destination, n *rules.Notification) outcome {
	ev, err := CloudEvent(n)
	if err != nil {
		return outcome{err: fmt.Errorf("build cloudevent: %w", err)}
	}
	ctx = cloudevents.ContextWithTarget(ctx, d.URL)
	if d.Mode == "binary" {
		ctx = binding.WithForceBinary(ctx)
	} else {
		ctx = binding.WithForceStructured(ctx)
	}
	res := s.ce.Send(ctx, ev)
	var hr *cehttp.Result
	code := 0
	if cloudevents.ResultAs(res, &hr) {
		code = hr.StatusCode
	}
	if cloudevents.IsUndelivered(res) || !cloudevents.IsACK(res) {
		return outcome{code: code, err: redactURL(fmt.Errorf("cloudevent not accepted: %w", res))}
	}
	return outcome{code: code}
}

// ErrPrivateAddress refuses a destination on a private network.
var ErrPrivateAddress = errors.New("destination address is on a loopback, private or link-local network")

// refusePrivate refuses to connect to the gateway's own networks: with
// DenyPrivate, a tenant's URL cannot reach the cloud's metadata service or
// the services beside the gateway. It checks the address actually dialed,
// after name resolution, so a DNS name cannot get around it.
func refusePrivate(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() {
		return fmt.Errorf("%w: %s", ErrPrivateAddress, ip)
	}
	return nil
}
