package main

import (
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/pgtest"
)

// TestLoadConfigHostEnvironments: ESCROW_HOSTS and ESCROW_DEFAULT_ENVIRONMENT
// as the service defines them (host names matched without regard
// to case; an unlisted host gets the default, test unless set).
func TestLoadConfigHostEnvironments(t *testing.T) {
	type hosts = map[string]domain.Environment
	for _, tc := range []struct {
		name        string
		hosts, def  string
		wantHosts   hosts
		wantDefault domain.Environment
		wantErr     string
	}{
		{name: "nothing set", wantHosts: hosts{}, wantDefault: domain.Test},
		{name: "the spec's example", hosts: "api.example.com=live,staging.example.com=test",
			wantHosts: hosts{"api.example.com": domain.Live, "staging.example.com": domain.Test}, wantDefault: domain.Test},
		{name: "one host", hosts: "api.example.com=live", wantHosts: hosts{"api.example.com": domain.Live}, wantDefault: domain.Test},
		{name: "default live", def: "live", wantHosts: hosts{}, wantDefault: domain.Live},
		{name: "default live with a test host", hosts: "sandbox.example.com=test", def: "live",
			wantHosts: hosts{"sandbox.example.com": domain.Test}, wantDefault: domain.Live},
		{name: "explicit default test", def: "test", wantHosts: hosts{}, wantDefault: domain.Test},
		{name: "host names are case-insensitive", hosts: "API.Example.COM=live,Staging.EXAMPLE.com=test",
			wantHosts: hosts{"api.example.com": domain.Live, "staging.example.com": domain.Test}, wantDefault: domain.Test},
		{name: "spaces around pairs, names and values", hosts: " api.example.com = live , staging.example.com=test ",
			wantHosts: hosts{"api.example.com": domain.Live, "staging.example.com": domain.Test}, wantDefault: domain.Test},

		{name: "pair without =", hosts: "api.example.com", wantErr: `ESCROW_HOSTS: "api.example.com" is not host=test|live`},
		{name: "empty host", hosts: "=live", wantErr: `ESCROW_HOSTS: "=live" is not host=test|live`},
		{name: "empty environment", hosts: "api.example.com=", wantErr: "ESCROW_HOSTS"},
		{name: "unknown environment", hosts: "api.example.com=prod", wantErr: `ESCROW_HOSTS: "api.example.com=prod" is not host=test|live`},
		{name: "environment in capitals", hosts: "api.example.com=LIVE", wantErr: "ESCROW_HOSTS"},
		{name: "second pair malformed", hosts: "api.example.com=live,staging.example.com", wantErr: `"staging.example.com"`},
		{name: "empty pair", hosts: "api.example.com=live,,staging.example.com=test", wantErr: "ESCROW_HOSTS"},
		{name: "two = in a pair", hosts: "api.example.com=live=test", wantErr: "ESCROW_HOSTS"},
		{name: "semicolon separator", hosts: "api.example.com=live;staging.example.com=test", wantErr: "ESCROW_HOSTS"},
		{name: "host with a port (never matches: requests match by name)", hosts: "localhost:8080=live",
			wantErr: `ESCROW_HOSTS: "localhost:8080" must name a host without a port`},
		{name: "one host in two environments", hosts: "api.example.com=live,API.example.com=test",
			wantErr: `ESCROW_HOSTS: "api.example.com" is mapped to both live and test`},
		{name: "one host twice, same environment", hosts: "api.example.com=live,api.example.com=live",
			wantHosts: hosts{"api.example.com": domain.Live}, wantDefault: domain.Test},
		{name: "unknown default", def: "prod", wantErr: "ESCROW_DEFAULT_ENVIRONMENT must be test or live"},
		{name: "default in capitals", def: "Live", wantErr: "ESCROW_DEFAULT_ENVIRONMENT must be test or live"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DATABASE_URL", "postgres://unused")
			t.Setenv("ESCROW_HOSTS", tc.hosts)
			t.Setenv("ESCROW_DEFAULT_ENVIRONMENT", tc.def)
			c, err := LoadConfig()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("LoadConfig() error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(c.Hosts, tc.wantHosts) || c.DefaultEnvironment != tc.wantDefault {
				t.Fatalf("hosts %v default %q, want %v default %q", c.Hosts, c.DefaultEnvironment, tc.wantHosts, tc.wantDefault)
			}
			// The HTTP layer gets exactly this map and default.
			hc := httpConfig(c)
			if !maps.Equal(hc.Hosts, tc.wantHosts) || hc.DefaultEnvironment != tc.wantDefault {
				t.Fatalf("http config hosts %v default %q", hc.Hosts, hc.DefaultEnvironment)
			}
		})
	}
}

func TestLoadConfigWebhookAllowPrivate(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    bool
		wantErr bool
	}{{"", false, false}, {"false", false, false}, {"true", true, false}, {"1", true, false}, {"yes", false, true}} {
		t.Run(tc.value, func(t *testing.T) {
			t.Setenv("DATABASE_URL", "postgres://unused")
			t.Setenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", tc.value)
			c, err := LoadConfig()
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "ESCROW_WEBHOOK_ALLOW_PRIVATE must be true or false") {
					t.Fatalf("LoadConfig() error %v", err)
				}
				return
			}
			if err != nil || c.WebhookAllowPriv != tc.want {
				t.Fatalf("AllowPrivate %v, err %v; want %v", c.WebhookAllowPriv, err, tc.want)
			}
		})
	}
}

func TestLoadConfigAppendCalls(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    int
		wantErr bool
	}{{"", 1, false}, {"1", 1, false}, {"0", 0, false}, {"3", 3, false}, {"-1", 0, true}, {"many", 0, true}} {
		t.Run(tc.value, func(t *testing.T) {
			t.Setenv("DATABASE_URL", "postgres://unused")
			t.Setenv("ESCROW_APPEND_CALLS", tc.value)
			c, err := LoadConfig()
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "ESCROW_APPEND_CALLS must be a non-negative integer") {
					t.Fatalf("LoadConfig() error %v", err)
				}
				return
			}
			if err != nil || c.AppendCalls != tc.want {
				t.Fatalf("AppendCalls %d, err %v; want %d", c.AppendCalls, err, tc.want)
			}
		})
	}
}

func TestLoadConfigFilesQuota(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    int64
		wantErr bool
	}{{"", 1024, false}, {"1", 1, false}, {"5000", 5000, false}, {"0", 0, true}, {"-1", 0, true}, {"lots", 0, true}} {
		t.Run(tc.value, func(t *testing.T) {
			t.Setenv("DATABASE_URL", "postgres://unused")
			t.Setenv("ESCROW_FILES_QUOTA_MB", tc.value)
			c, err := LoadConfig()
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "ESCROW_FILES_QUOTA_MB must be a positive number of megabytes") {
					t.Fatalf("LoadConfig() error %v", err)
				}
				return
			}
			if err != nil || c.FilesQuotaMB != tc.want || httpConfig(c).FilesQuota != tc.want<<20 {
				t.Fatalf("FilesQuotaMB %d, err %v; want %d", c.FilesQuotaMB, err, tc.want)
			}
		})
	}
}

// The setting reaches the PostgreSQL store the commands and the server use.
func TestAppendCallsReachTheStore(t *testing.T) {
	db := pgtest.NewURL(t)
	for _, v := range []string{"0", "3"} {
		t.Setenv("ESCROW_APPEND_CALLS", v)
		env := testEnv(t, db)
		ps, ok := env.Raw.(*postgres.Store)
		if !ok {
			t.Fatalf("store is %T", env.Raw)
		}
		if want, _ := strconv.Atoi(v); ps.AppendCalls != want {
			t.Fatalf("ESCROW_APPEND_CALLS=%s: store's AppendCalls %d", v, ps.AppendCalls)
		}
	}
}

func TestLoadConfigDeadlines(t *testing.T) {
	for _, tc := range []struct {
		interval, lease string
		want            [2]time.Duration
		wantErr         string
	}{
		{want: [2]time.Duration{10 * time.Second, time.Minute}},
		{interval: "250ms", lease: "5s", want: [2]time.Duration{250 * time.Millisecond, 5 * time.Second}},
		{interval: "0s", wantErr: "ESCROW_DEADLINES_INTERVAL must be a positive duration such as 10s"},
		{interval: "often", wantErr: "ESCROW_DEADLINES_INTERVAL must be a positive duration such as 10s"},
		{lease: "-1m", wantErr: "ESCROW_DEADLINES_LEASE must be a positive duration such as 1m0s"},
	} {
		t.Run(tc.interval+"/"+tc.lease, func(t *testing.T) {
			t.Setenv("DATABASE_URL", "postgres://unused")
			t.Setenv("ESCROW_DEADLINES_INTERVAL", tc.interval)
			t.Setenv("ESCROW_DEADLINES_LEASE", tc.lease)
			c, err := LoadConfig()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("LoadConfig() error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || c.DeadlinesInterval != tc.want[0] || c.DeadlinesLease != tc.want[1] {
				t.Fatalf("interval %s lease %s, err %v; want %v", c.DeadlinesInterval, c.DeadlinesLease, err, tc.want)
			}
		})
	}
}

// TestLoadConfigMetricsAddr: the metrics listener defaults to this
// machine's port 9090, apart from the API's address.
func TestLoadConfigMetricsAddr(t *testing.T) {
	db := pgtest.ServerURL(t)
	t.Setenv("ESCROW_METRICS_ADDR", "")
	os.Unsetenv("ESCROW_METRICS_ADDR") // restored by t.Setenv
	if c := mustConfig(t, db); c.MetricsAddr != "127.0.0.1:9090" {
		t.Fatalf("default metrics address %q", c.MetricsAddr)
	}
	t.Setenv("ESCROW_METRICS_ADDR", "off")
	if c := mustConfig(t, db); c.MetricsAddr != "off" {
		t.Fatalf("metrics address %q", c.MetricsAddr)
	}
}

func TestLoadConfigFileStore(t *testing.T) {
	s3 := map[string]string{"ESCROW_FILE_STORE": "s3", "ESCROW_S3_ENDPOINT": "https://s3.eu-west-1.amazonaws.com",
		"ESCROW_S3_BUCKET": "files", "ESCROW_S3_ACCESS_KEY": "AK", "ESCROW_S3_SECRET_KEY": "SK"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range s3 {
			m[a] = b
		}
		m[k] = v
		return m
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    string
		wantErr string
	}{
		{"default", nil, "postgres", ""},
		{"postgres", map[string]string{"ESCROW_FILE_STORE": "postgres"}, "postgres", ""},
		{"s3", s3, "s3", ""},
		{"unknown", map[string]string{"ESCROW_FILE_STORE": "disk"}, "", "ESCROW_FILE_STORE must be postgres or s3"},
		{"no endpoint", with("ESCROW_S3_ENDPOINT", ""), "", "ESCROW_S3_ENDPOINT must be"},
		{"endpoint with a path", with("ESCROW_S3_ENDPOINT", "https://s3.example.com/bucket"), "", "ESCROW_S3_ENDPOINT must be"},
		{"endpoint with credentials", with("ESCROW_S3_ENDPOINT", "https://ak:sk@s3.example.com"), "", "ESCROW_S3_ENDPOINT must be"},
		{"endpoint not http", with("ESCROW_S3_ENDPOINT", "s3.example.com"), "", "ESCROW_S3_ENDPOINT must be"},
		{"no bucket", with("ESCROW_S3_BUCKET", ""), "", "ESCROW_S3_BUCKET is required"},
		{"no secret", with("ESCROW_S3_SECRET_KEY", ""), "", "ESCROW_S3_ACCESS_KEY and ESCROW_S3_SECRET_KEY are required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DATABASE_URL", "postgres://unused")
			for _, k := range []string{"ESCROW_FILE_STORE", "ESCROW_S3_ENDPOINT", "ESCROW_S3_BUCKET", "ESCROW_S3_ACCESS_KEY", "ESCROW_S3_SECRET_KEY"} {
				t.Setenv(k, tc.env[k])
			}
			c, err := LoadConfig()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("LoadConfig() error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || c.FileStore != tc.want {
				t.Fatalf("FileStore %q, err %v; want %q", c.FileStore, err, tc.want)
			}
			if tc.want == "s3" && (c.S3.Region != "us-east-1" || fmt.Sprint(c.S3.SecretKey) != "[redacted]") {
				t.Fatalf("S3 %+v", c.S3)
			}
		})
	}
}
