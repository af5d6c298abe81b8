package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/whitelist"
	"github.com/escrowd/escrowd/eventstore/postgres"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/webhooks"
)

// Config is read from environment variables.
type Config struct {
	DatabaseURL string
	Addr        string
	// MetricsAddr is where serve answers GET /metrics, apart from the API
	// (ESCROW_METRICS_ADDR, default 127.0.0.1:9090; "off": nowhere).
	MetricsAddr string
	// MasterKeyFile names the master key that wraps the data keys
	// (ESCROW_MASTER_KEY_FILE; 32 random bytes, base64).
	MasterKeyFile      string
	EventStore         string
	KurrentURL         string
	Hosts              map[string]domain.Environment
	DefaultEnvironment domain.Environment
	RateLimitPerMinute int
	AppendCalls        int
	PublicURL          string
	DataDir            string
	// FilesQuotaMB bounds each merchant environment's stored files
	// (ESCROW_FILES_QUOTA_MB, default 1,024).
	FilesQuotaMB int64
	// FileStore is where uploaded files are kept (ESCROW_FILE_STORE):
	// postgres (the database's stored_files table, the default) or s3
	// (the bucket of S3).
	FileStore        string
	S3               S3Config
	WebhookAllowPriv bool
	WebhookRetention time.Duration
	// WebhookSignatureHeaders each carry a delivery's signature;
	// WebhookUserAgent is its User-Agent.
	WebhookSignatureHeaders []string
	WebhookUserAgent        string
	TrustedProxies          []*net.IPNet
	BSCMasterTest           string
	BSCMasterLive           string
	LogFormat               string
	// DeadlinesInterval is how often each API process acts on the
	// escrows' deadlines that have passed; DeadlinesLease how long one it
	// took is left to it before another process may take it.
	DeadlinesInterval time.Duration
	DeadlinesLease    time.Duration
	// Providers are the payment provider of each environment: test is
	// builtin (the built-in test gateways) or paystack; live is paystack
	// or absent (no deposits, payouts or account resolution).
	Providers map[domain.Environment]Provider
}

// S3Config is the bucket of ESCROW_FILE_STORE=s3.
type S3Config struct {
	Endpoint, Bucket, Region, AccessKey string
	SecretKey                           secretKey
}

// Provider is one environment's payment provider.
type Provider struct {
	Name      string // "builtin" or "paystack"
	SecretKey secretKey
	BaseURL   string
	DVABank   string
}

// secretKey is a provider's secret key: it prints as [redacted] however it
// is printed, so that no log line or error carries it.
type secretKey string

func (secretKey) String() string               { return "[redacted]" }
func (secretKey) GoString() string             { return "[redacted]" }
func (secretKey) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }
func (k secretKey) Format(f fmt.State, _ rune) { fmt.Fprint(f, k.String()) }

// secretEnv reads a secret from name, or from the file name_FILE names
// (surrounding whitespace dropped); both set is an error.
func secretEnv(name string) (secretKey, error) {
	v, path := strings.TrimSpace(os.Getenv(name)), os.Getenv(name+"_FILE")
	if path == "" {
		return secretKey(v), nil
	}
	if v != "" {
		return "", fmt.Errorf("set %s or %s_FILE, not both", name, name)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s_FILE: %v", name, err)
	}
	return secretKey(strings.TrimSpace(string(b))), nil
}

// loadProviders reads the payment provider of each environment.
func loadProviders() (map[domain.Environment]Provider, error) {
	base := strings.TrimRight(getenv("ESCROW_PAYSTACK_BASE_URL", "https://api.paystack.co"), "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("ESCROW_PAYSTACK_BASE_URL must be an http or https URL")
	}
	dva := getenv("ESCROW_PAYSTACK_DVA_BANK", "wema-bank")
	out := map[domain.Environment]Provider{}
	for _, env := range []domain.Environment{domain.Test, domain.Live} {
		suffix := strings.ToUpper(string(env))
		def := ""
		if env == domain.Test {
			def = "builtin"
		}
		name := getenv("ESCROW_PROVIDER_"+suffix, def)
		keyVar := "ESCROW_PAYSTACK_SECRET_KEY_" + suffix
		key, err := secretEnv(keyVar)
		if err != nil {
			return nil, err
		}
		switch {
		case name == "paystack":
			if key == "" {
				return nil, fmt.Errorf("ESCROW_PROVIDER_%s=paystack needs %s (or %s_FILE)", suffix, keyVar, keyVar)
			}
			out[env] = Provider{Name: name, SecretKey: key, BaseURL: base, DVABank: dva}
		case name == "builtin" && env == domain.Test:
			out[env] = Provider{Name: name}
		case name == "" && env == domain.Live:
			// None: live moves no money.
		case env == domain.Test:
			return nil, fmt.Errorf("ESCROW_PROVIDER_TEST must be builtin or paystack")
		default:
			return nil, fmt.Errorf("ESCROW_PROVIDER_LIVE must be paystack, or unset")
		}
	}
	return out, nil
}

func getenv(k, def string) string {
	if v, ok := os.LookupEnv(k); ok && v != "" {
		return v
	}
	return def
}

// defaultMetricsAddr keeps the metrics on this machine unless the operator
// chooses an address a scraper can reach.
const defaultMetricsAddr = "127.0.0.1:9090"

// LoadConfig reads and validates the configuration.
func LoadConfig() (Config, error) {
	c := Config{
		DatabaseURL:        os.Getenv("DATABASE_URL"),
		Addr:               getenv("ESCROW_ADDR", ":8080"),
		MetricsAddr:        getenv("ESCROW_METRICS_ADDR", defaultMetricsAddr),
		MasterKeyFile:      os.Getenv("ESCROW_MASTER_KEY_FILE"),
		EventStore:         getenv("ESCROW_EVENT_STORE", "postgres"),
		KurrentURL:         os.Getenv("KURRENTDB_URL"),
		Hosts:              map[string]domain.Environment{},
		DefaultEnvironment: domain.Environment(getenv("ESCROW_DEFAULT_ENVIRONMENT", "test")),
		// Unset, file and checkout URLs point at this machine's port.
		PublicURL:     strings.TrimRight(getenv("ESCROW_PUBLIC_URL", "http://"+reachable(getenv("ESCROW_ADDR", ":8080"))), "/"),
		DataDir:       getenv("ESCROW_DATA_DIR", "./.data"),
		BSCMasterTest: os.Getenv("ESCROW_BSC_MASTER_ADDRESS_TEST"),
		BSCMasterLive: os.Getenv("ESCROW_BSC_MASTER_ADDRESS_LIVE"),
		LogFormat:     getenv("ESCROW_LOG_FORMAT", "json"),
	}
	if c.DatabaseURL == "" {
		return c, fmt.Errorf("DATABASE_URL is not set (in a checkout, for its throwaway database: export DATABASE_URL=$(scripts/pg.sh url))")
	}
	if !c.DefaultEnvironment.Valid() {
		return c, fmt.Errorf("ESCROW_DEFAULT_ENVIRONMENT must be test or live")
	}
	if c.EventStore != "postgres" && c.EventStore != "kurrent" {
		return c, fmt.Errorf("ESCROW_EVENT_STORE must be postgres or kurrent")
	}
	rl, err := strconv.Atoi(getenv("ESCROW_RATE_LIMIT_PER_MINUTE", "10"))
	if err != nil || rl < 0 {
		return c, fmt.Errorf("ESCROW_RATE_LIMIT_PER_MINUTE must be a non-negative integer")
	}
	c.RateLimitPerMinute = rl
	ac, err := strconv.Atoi(getenv("ESCROW_APPEND_CALLS", strconv.Itoa(postgres.DefaultAppendCalls)))
	if err != nil || ac < 0 {
		return c, fmt.Errorf("ESCROW_APPEND_CALLS must be a non-negative integer")
	}
	c.AppendCalls = ac
	if c.FilesQuotaMB, err = strconv.ParseInt(getenv("ESCROW_FILES_QUOTA_MB", "1024"), 10, 64); err != nil ||
		c.FilesQuotaMB < 1 || c.FilesQuotaMB > 1<<30 {
		return c, fmt.Errorf("ESCROW_FILES_QUOTA_MB must be a positive number of megabytes")
	}
	if err := loadFileStore(&c); err != nil {
		return c, err
	}
	for name, v := range map[string]string{"ESCROW_BSC_MASTER_ADDRESS_TEST": c.BSCMasterTest, "ESCROW_BSC_MASTER_ADDRESS_LIVE": c.BSCMasterLive} {
		if v != "" && !whitelist.ValidAddress(v) {
			return c, fmt.Errorf("%s must be 0x followed by 40 hexadecimal characters", name)
		}
	}
	if c.WebhookAllowPriv, err = strconv.ParseBool(getenv("ESCROW_WEBHOOK_ALLOW_PRIVATE", "false")); err != nil {
		return c, fmt.Errorf("ESCROW_WEBHOOK_ALLOW_PRIVATE must be true or false")
	}
	ret, err := time.ParseDuration(getenv("ESCROW_WEBHOOK_RETENTION", webhooks.DefaultRetention.String()))
	if err != nil || ret <= 0 {
		return c, fmt.Errorf("ESCROW_WEBHOOK_RETENTION must be a positive duration such as 720h")
	}
	c.WebhookRetention = ret
	for _, d := range []struct {
		name string
		def  time.Duration
		to   *time.Duration
	}{{"ESCROW_DEADLINES_INTERVAL", app.DefaultDeadlineInterval, &c.DeadlinesInterval},
		{"ESCROW_DEADLINES_LEASE", app.DefaultDeadlineLease, &c.DeadlinesLease}} {
		v, err := time.ParseDuration(getenv(d.name, d.def.String()))
		if err != nil || v <= 0 {
			return c, fmt.Errorf("%s must be a positive duration such as %s", d.name, d.def)
		}
		*d.to = v
	}
	if c.WebhookSignatureHeaders, err = webhooks.ParseSignatureHeaders(os.Getenv("ESCROW_WEBHOOK_SIGNATURE_HEADERS")); err != nil {
		return c, fmt.Errorf("ESCROW_WEBHOOK_SIGNATURE_HEADERS: %v", err)
	}
	c.WebhookUserAgent = strings.TrimSpace(getenv("ESCROW_WEBHOOK_USER_AGENT", webhooks.UserAgent))
	if !httpguts.ValidHeaderFieldValue(c.WebhookUserAgent) {
		return c, fmt.Errorf("ESCROW_WEBHOOK_USER_AGENT must be a valid header value")
	}
	if hosts := os.Getenv("ESCROW_HOSTS"); hosts != "" {
		for _, pair := range strings.Split(hosts, ",") {
			h, env, ok := strings.Cut(strings.TrimSpace(pair), "=")
			e := domain.Environment(strings.TrimSpace(env))
			if !ok || h == "" || !e.Valid() {
				return c, fmt.Errorf("ESCROW_HOSTS: %q is not host=test|live", pair)
			}
			h = strings.ToLower(strings.TrimSpace(h))
			if _, _, err := net.SplitHostPort(h); err == nil {
				// Requests are matched by host name alone (the port is
				// stripped), so this entry could never match.
				return c, fmt.Errorf("ESCROW_HOSTS: %q must name a host without a port", h)
			}
			if prev, dup := c.Hosts[h]; dup && prev != e {
				return c, fmt.Errorf("ESCROW_HOSTS: %q is mapped to both %s and %s", h, prev, e)
			}
			c.Hosts[h] = e
		}
	}
	if c.Providers, err = loadProviders(); err != nil {
		return c, err
	}
	if tp := os.Getenv("ESCROW_TRUSTED_PROXIES"); tp != "" {
		for _, s := range strings.Split(tp, ",") {
			s = strings.TrimSpace(s)
			if !strings.Contains(s, "/") {
				if strings.Contains(s, ":") {
					s += "/128"
				} else {
					s += "/32"
				}
			}
			_, n, err := net.ParseCIDR(s)
			if err != nil {
				return c, fmt.Errorf("ESCROW_TRUSTED_PROXIES: %v", err)
			}
			c.TrustedProxies = append(c.TrustedProxies, n)
		}
	}
	return c, nil
}

// loadFileStore reads ESCROW_FILE_STORE and, for s3, the bucket's settings.
func loadFileStore(c *Config) error {
	c.FileStore = getenv("ESCROW_FILE_STORE", "postgres")
	switch c.FileStore {
	case "postgres":
		return nil
	case "s3":
	default:
		return fmt.Errorf("ESCROW_FILE_STORE must be postgres or s3")
	}
	c.S3 = S3Config{Endpoint: os.Getenv("ESCROW_S3_ENDPOINT"), Bucket: os.Getenv("ESCROW_S3_BUCKET"),
		Region: getenv("ESCROW_S3_REGION", "us-east-1"), AccessKey: os.Getenv("ESCROW_S3_ACCESS_KEY"),
		SecretKey: secretKey(os.Getenv("ESCROW_S3_SECRET_KEY"))}
	u, err := url.Parse(c.S3.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
		return fmt.Errorf("ESCROW_S3_ENDPOINT must be the http(s) URL of the S3 service, without a path or credentials (https://s3.eu-west-1.amazonaws.com)")
	}
	if c.S3.Bucket == "" {
		return fmt.Errorf("ESCROW_S3_BUCKET is required with ESCROW_FILE_STORE=s3")
	}
	if c.S3.AccessKey == "" || c.S3.SecretKey == "" {
		return fmt.Errorf("ESCROW_S3_ACCESS_KEY and ESCROW_S3_SECRET_KEY are required with ESCROW_FILE_STORE=s3")
	}
	return nil
}
