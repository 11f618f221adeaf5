package client_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/eventgate/eventgate/client"
)

// A service records events about the objects it manages, as a Kubernetes
// controller does with client-go's recorder.
func ExampleClient_NewRecorder() {
	c, err := client.New("eventgate.example.com:9090", client.WithTLS(nil), client.WithToken(os.Getenv("EVENTGATE_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	rec := c.NewRecorder(client.RecorderOptions{
		ReportingController: "example.com/payments",
		ReportingInstance:   "payments-7d9f8",
		PerObjectBurst:      25, // client-go's spam filter: 25, then one per 5 minutes
		PerObjectInterval:   5 * time.Minute,
		Metrics: client.Metrics{OnDrop: func(ev *client.Event, reason client.DropReason) {
			log.Printf("event %s dropped: %s", ev.Reason, reason)
		}},
	})
	order := &client.ObjectReference{ApiVersion: "payments.example.com/v1", Kind: "Order", Namespace: "shop", Name: "order-1234"}
	rec.Eventf(order, nil, client.TypeNormal, "Charged", "Charge", "charged %d EUR", 42)

	// On shutdown: send what is queued, within a bound.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		log.Print(err)
	}
}

// Watch follows events, resuming after disconnects; list first, as an
// informer does, so that nothing between the list and the watch is missed.
func ExampleClient_Watch() {
	c, err := client.New("localhost:9090", client.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var rv string
	for ev, err := range c.QueryResourceVersion(ctx, &client.QueryRequest{Namespace: "shop", Type: []string{client.TypeWarning}}, &rv) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("listed", ev.Reason, ev.Note)
	}
	req := &client.StreamWatchRequest{Namespace: "shop", Types: []string{client.TypeWarning}, ResourceVersion: rv}
	for we, err := range c.Watch(ctx, req, client.WatchOptions{BookmarkInterval: time.Minute}) {
		if err != nil {
			log.Fatal(err)
		}
		if we.Type == client.Bookmark {
			continue // we.Event.ResourceVersion is where a later watch would resume
		}
		fmt.Println(we.Type, we.Event.Reason, we.Event.Note)
	}
}

// Query yields every matching event, page after page.
func ExampleClient_Query() {
	c, err := client.New("localhost:9090", client.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for ev, err := range c.Query(ctx, &client.QueryRequest{FieldSelector: "reason in (BackOff,Failed)", PageSize: 500}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.EventTime.AsTime(), ev.Regarding.GetName(), ev.Note)
	}
}

// Credentials: mutual TLS, or a token refreshed before every call.
func ExampleNew() {
	// Mutual TLS: the gateway maps the client certificate to a principal.
	mtls, err := client.New("eventgate.internal:9090",
		client.WithCAFile("/etc/eventgate/ca.pem"),
		client.WithClientCertificate("/etc/eventgate/tls.crt", "/etc/eventgate/tls.key"))
	if err != nil {
		log.Fatal(err)
	}
	defer mtls.Close()

	// A short-lived token, read again for every call (a projected
	// service-account token, an OIDC token refreshed by a sidecar).
	refreshing, err := client.New("eventgate.example.com:443",
		client.WithTLS(&tls.Config{MinVersion: tls.VersionTLS13}),
		client.WithTokenSource(func(context.Context) (string, error) {
			b, err := os.ReadFile("/var/run/secrets/eventgate/token")
			return string(b), err
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer refreshing.Close()
}
