package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authnv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/yaml"
)

// The extra keys the gateway's SelfSubjectReview carries eventgate's
// default tenant and grants in (k8sapi.ExtraDefaultTenant, ExtraGrants;
// not imported: the CLI builds without the server's packages).
const (
	extraDefaultTenant = "eventgate.io/default-tenant"
	extraGrants        = "eventgate.io/grants"
)

func newWhoami(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Show who the gateway takes you for: principal, groups, default tenant and grants",
		Long: `Show who the gateway takes you for. It asks the gateway's HTTP listener (--http-server) the
question kubectl auth whoami asks, so both answer the same.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := g.selfSubjectReview(cmd.Context())
			if err != nil {
				return err
			}
			var ssr authnv1.SelfSubjectReview
			if err := json.Unmarshal(body, &ssr); err != nil {
				return fmt.Errorf("the server's answer: %w", err)
			}
			switch output {
			case "json":
				var buf bytes.Buffer
				if err := json.Indent(&buf, body, "", "    "); err != nil {
					return err
				}
				fmt.Fprintln(g.stdout, buf.String())
				return nil
			case "yaml":
				b, err := yaml.JSONToYAML(body)
				if err != nil {
					return err
				}
				_, err = g.stdout.Write(b)
				return err
			case "":
			default:
				return fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: json,yaml", output)
			}
			u := ssr.Status.UserInfo
			p, _ := newPrinter(g.stdout, "", false)
			fmt.Fprintf(p.tw, "ATTRIBUTE\tVALUE\n")
			fmt.Fprintf(p.tw, "Username\t%s\n", u.Username)
			fmt.Fprintf(p.tw, "Groups\t%s\n", strings.Join(u.Groups, ", "))
			for _, t := range u.Extra[extraDefaultTenant] {
				fmt.Fprintf(p.tw, "Default tenant\t%s\n", t)
			}
			for _, gr := range u.Extra[extraGrants] {
				fmt.Fprintf(p.tw, "Grant\t%s\n", gr)
			}
			return p.tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml (default: a table)")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletion("json", "yaml"))
	return cmd
}

// selfSubjectReview asks the gateway's HTTP listener who the caller is
// (kubectl auth whoami's question) and returns the answer's JSON.
func (g *globals) selfSubjectReview(ctx context.Context) ([]byte, error) {
	conn, err := g.resolve()
	if err != nil {
		return nil, err
	}
	base, hc, err := conn.httpClient()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/apis/authentication.k8s.io/v1/selfsubjectreviews",
		strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if tok, err := conn.bearer(); err != nil {
		return nil, err
	} else if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &connError{server: base, cause: err.Error()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var st struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &st) == nil && st.Message != "" {
			return nil, &serverError{reason: st.Reason, message: st.Message}
		}
		return nil, fmt.Errorf("the server answered %s", resp.Status)
	}
	return body, nil
}

// bearer is the token to send, read from its file when there is one.
func (c connection) bearer() (string, error) {
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return "", fmt.Errorf("token file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return c.Token, nil
}

// httpClient is a client for the gateway's HTTP listener with the
// connection's TLS settings, and its base URL.
func (c connection) httpClient() (string, *http.Client, error) {
	base := c.HTTPServer
	if base == "" {
		host, _, err := net.SplitHostPort(c.Server)
		if err != nil {
			return "", nil, fmt.Errorf("server %q: %w", c.Server, err)
		}
		scheme := "https"
		if c.Insecure {
			scheme = "http"
		}
		base = scheme + "://" + net.JoinHostPort(host, "8080")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return "", nil, fmt.Errorf("CA file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return "", nil, fmt.Errorf("CA file %s: no PEM certificate", c.CAFile)
		}
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return "", nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return strings.TrimSuffix(base, "/"), &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}

// serverError is a refusal by the gateway's HTTP listener (a Kubernetes
// Status).
type serverError struct{ reason, message string }

func (e *serverError) Error() string { return e.reason + ": " + e.message }
