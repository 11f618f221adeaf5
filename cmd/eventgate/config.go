package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"

	"github.com/eventgate/eventgate/client"
)

// contextsFile is the contexts file, shaped like a kubeconfig's contexts.
type contextsFile struct {
	CurrentContext string         `json:"current-context"`
	Contexts       []namedContext `json:"contexts"`
}

type namedContext struct {
	Name string `json:"name"`
	connection
}

// connection is where and as whom to connect.
type connection struct {
	Server string `json:"server,omitempty"`
	// HTTPServer is the gateway's HTTP URL (whoami asks it); default: the
	// server's host on port 8080.
	HTTPServer string `json:"httpServer,omitempty"`
	Insecure   bool   `json:"insecure,omitempty"`
	Token      string `json:"token,omitempty"`
	TokenFile  string `json:"tokenFile,omitempty"`
	Tenant     string `json:"tenant,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	CAFile     string `json:"caFile,omitempty"`
	CertFile   string `json:"certFile,omitempty"`
	KeyFile    string `json:"keyFile,omitempty"`
}

// globals are the flags every command takes.
type globals struct {
	stdout, stderr io.Writer
	getenv         func(string) string

	configPath, contextName string
	flags                   connection
	insecureSet             bool
}

func (g *globals) addFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&g.configPath, "config", "", "contexts file (default $EVENTGATE_CONFIG, else ~/.config/eventgate/config.yaml)")
	f.StringVar(&g.contextName, "context", "", "context of the contexts file to use (default its current-context)")
	f.StringVarP(&g.flags.Server, "server", "s", "", "gateway gRPC address host:port (env EVENTGATE_SERVER)")
	f.StringVar(&g.flags.HTTPServer, "http-server", "", "gateway HTTP URL, for whoami (env EVENTGATE_HTTP_SERVER; default: the server's host, port 8080)")
	f.StringVar(&g.flags.Token, "token", "", "bearer token (env EVENTGATE_TOKEN)")
	f.StringVar(&g.flags.TokenFile, "token-file", "", "file holding the bearer token, read before every call")
	f.StringVar(&g.flags.Tenant, "tenant", "", "tenant as type/name, e.g. project/shop, or global (env EVENTGATE_TENANT)")
	f.StringVarP(&g.flags.Namespace, "namespace", "n", "", "namespace of the events")
	f.BoolVar(&g.flags.Insecure, "insecure", false, "connect without TLS (a gateway on loopback)")
	f.StringVar(&g.flags.CAFile, "ca-file", "", "PEM certificates to trust for the server")
	f.StringVar(&g.flags.CertFile, "cert-file", "", "client certificate for mutual TLS")
	f.StringVar(&g.flags.KeyFile, "key-file", "", "client key for mutual TLS")
	cmd.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		g.insecureSet = cmd.Flags().Changed("insecure")
	}
}

// resolve merges flags over the environment over the contexts file.
func (g *globals) resolve() (connection, error) {
	var c connection
	path := g.configPath
	if path == "" {
		path = g.getenv("EVENTGATE_CONFIG")
	}
	explicit := path != ""
	if path == "" {
		if dir, err := os.UserConfigDir(); err == nil {
			path = filepath.Join(dir, "eventgate", "config.yaml")
		}
	}
	if path != "" {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			var f contextsFile
			if err := yaml.UnmarshalStrict(b, &f); err != nil {
				return c, fmt.Errorf("contexts file %s: %w", path, err)
			}
			name := g.contextName
			if name == "" {
				name = f.CurrentContext
			}
			found := name == ""
			for _, nc := range f.Contexts {
				if nc.Name == name {
					c, found = nc.connection, true
				}
			}
			if !found {
				return c, fmt.Errorf("context %q is not in %s", name, path)
			}
		case errors.Is(err, os.ErrNotExist) && !explicit && g.contextName == "":
		default:
			return c, fmt.Errorf("contexts file: %w", err)
		}
	}
	set := func(dst *string, env, flag string) {
		if v := g.getenv(env); env != "" && v != "" {
			*dst = v
		}
		if flag != "" {
			*dst = flag
		}
	}
	set(&c.Server, "EVENTGATE_SERVER", g.flags.Server)
	set(&c.HTTPServer, "EVENTGATE_HTTP_SERVER", g.flags.HTTPServer)
	set(&c.Token, "EVENTGATE_TOKEN", g.flags.Token)
	set(&c.TokenFile, "", g.flags.TokenFile)
	set(&c.Tenant, "EVENTGATE_TENANT", g.flags.Tenant)
	set(&c.Namespace, "", g.flags.Namespace)
	set(&c.CAFile, "", g.flags.CAFile)
	set(&c.CertFile, "", g.flags.CertFile)
	set(&c.KeyFile, "", g.flags.KeyFile)
	if g.insecureSet {
		c.Insecure = g.flags.Insecure
	}
	if c.Server == "" {
		c.Server = "localhost:9090"
	}
	if !g.insecureSet && !c.Insecure && c.CAFile == "" && c.CertFile == "" && isLoopback(c.Server) {
		// The gateway's own default: on loopback without TLS. A gateway
		// with TLS on loopback needs --ca-file (or --insecure=false).
		c.Insecure = true
	}
	return c, nil
}

func isLoopback(server string) bool {
	host, _, err := net.SplitHostPort(server)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tenant parses "type/name" ("global" alone).
func (c connection) tenant() (*client.Tenant, error) {
	if c.Tenant == "" {
		return nil, nil
	}
	typ, name, _ := strings.Cut(c.Tenant, "/")
	if typ == "global" {
		return &client.Tenant{Type: "global"}, nil
	}
	if typ == "" || name == "" {
		return nil, fmt.Errorf("tenant %q: want type/name, e.g. project/shop, or global", c.Tenant)
	}
	return &client.Tenant{Type: typ, Name: name}, nil
}

// dial connects to the resolved server.
// dialTenant is dial and the connection's tenant (nil: the caller's
// default), the client closed when the tenant is not valid.
func (g *globals) dialTenant() (*client.Client, connection, *client.Tenant, error) {
	c, conn, err := g.dial()
	if err != nil {
		return nil, conn, nil, err
	}
	tenant, err := conn.tenant()
	if err != nil {
		c.Close()
		return nil, conn, nil, err
	}
	return c, conn, tenant, nil
}

func (g *globals) dial() (*client.Client, connection, error) {
	c, err := g.resolve()
	if err != nil {
		return nil, c, err
	}
	var opts []client.Option
	if c.Insecure {
		opts = append(opts, client.WithInsecure())
	} else {
		opts = append(opts, client.WithTLS(nil))
		if c.CAFile != "" {
			opts = append(opts, client.WithCAFile(c.CAFile))
		}
		if c.CertFile != "" || c.KeyFile != "" {
			opts = append(opts, client.WithClientCertificate(c.CertFile, c.KeyFile))
		}
	}
	switch {
	case c.TokenFile != "":
		file := c.TokenFile
		opts = append(opts, client.WithTokenSource(func(context.Context) (string, error) {
			b, err := os.ReadFile(file)
			return strings.TrimSpace(string(b)), err
		}))
	case c.Token != "":
		opts = append(opts, client.WithToken(c.Token))
	}
	cl, err := client.New(c.Server, opts...)
	return cl, c, err
}

// fieldViolations lists a status's google.rpc.BadRequest violations.
func fieldViolations(st *status.Status) string {
	var parts []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				parts = append(parts, v.GetField()+": "+v.GetDescription())
			}
		}
	}
	return strings.Join(parts, "; ")
}

func newConfig(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Show the connection settings in effect"}
	cmd.AddCommand(&cobra.Command{
		Use:   "view",
		Short: "Print the server, tenant and namespace the commands would use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.resolve()
			if err != nil {
				return err
			}
			if c.Token != "" {
				c.Token = "REDACTED"
			}
			b, err := yaml.Marshal(c)
			if err != nil {
				return err
			}
			_, err = g.stdout.Write(b)
			return err
		},
	})
	return cmd
}
