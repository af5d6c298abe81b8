package files

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config names an S3-compatible bucket (AWS S3, MinIO, Ceph, R2, ...).
type S3Config struct {
	// Endpoint is the service's URL: https://s3.eu-west-1.amazonaws.com,
	// http://127.0.0.1:9000. Its scheme decides TLS.
	Endpoint  string
	Bucket    string
	Region    string
	AccessKey string
	SecretKey string
}

// S3 keeps files as objects of one bucket, keyed by their stored names.
// Each object carries its SHA-256 (metadata), which Put compares.
type S3 struct {
	client *minio.Client
	bucket string
}

// shaMeta is the metadata key of an object's SHA-256 (hex).
const shaMeta = "Sha256"

// NewS3 connects to cfg's bucket and checks that it exists (the service
// never creates buckets: their policy is the operator's).
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("files: the S3 bucket is required")
	}
	client, err := newS3Client(cfg)
	if err != nil {
		return nil, err
	}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("files: S3 bucket %s: %w", cfg.Bucket, err)
	}
	if !ok {
		return nil, fmt.Errorf("files: S3 bucket %s does not exist", cfg.Bucket)
	}
	return &S3{client: client, bucket: cfg.Bucket}, nil
}

func notFound(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "NoSuchKey" || code == "NotFound"
}

func (s *S3) Put(ctx context.Context, o Object) error {
	sum := hex.EncodeToString(o.SHA256[:])
	st, err := s.client.StatObject(ctx, s.bucket, o.Name, minio.StatObjectOptions{})
	switch {
	case err == nil:
		if !strings.EqualFold(st.UserMetadata[shaMeta], sum) {
			return fmt.Errorf("%w: %s", ErrExists, o.Name)
		}
		return nil
	case !notFound(err):
		return fmt.Errorf("files: store %s: %w", o.Name, err)
	}
	_, err = s.client.PutObject(ctx, s.bucket, o.Name, bytes.NewReader(o.Data), int64(len(o.Data)), minio.PutObjectOptions{
		ContentType: typeOfName(o.Name), UserMetadata: map[string]string{shaMeta: sum}, SendContentMd5: true,
	})
	if err != nil {
		return fmt.Errorf("files: store %s: %w", o.Name, err)
	}
	return nil
}

func (s *S3) Get(ctx context.Context, name string) (Object, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, name, minio.GetObjectOptions{})
	if err != nil {
		return Object{}, fmt.Errorf("files: read %s: %w", name, err)
	}
	defer obj.Close()
	st, err := obj.Stat()
	if notFound(err) {
		return Object{}, ErrNotFound
	}
	if err != nil {
		return Object{}, fmt.Errorf("files: read %s: %w", name, err)
	}
	if st.Size > MaxImageBytes {
		return Object{}, fmt.Errorf("files: read %s: %d bytes, more than any file the service stores", name, st.Size)
	}
	data, err := io.ReadAll(obj)
	if err != nil {
		return Object{}, fmt.Errorf("files: read %s: %w", name, err)
	}
	o := NewObject(name, data)
	o.Created = st.LastModified
	return o, nil
}

func (s *S3) Delete(ctx context.Context, name string) (int64, error) {
	st, err := s.client.StatObject(ctx, s.bucket, name, minio.StatObjectOptions{})
	if notFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("files: delete %s: %w", name, err)
	}
	if err := s.client.RemoveObject(ctx, s.bucket, name, minio.RemoveObjectOptions{}); err != nil {
		return 0, fmt.Errorf("files: delete %s: %w", name, err)
	}
	return st.Size, nil
}

func (s *S3) Usage(ctx context.Context, owner string) (int64, error) {
	var n int64
	err := s.list(ctx, owner+"/", func(i Info) error { n += i.Size; return nil })
	return n, err
}

func (s *S3) List(ctx context.Context, fn func(Info) error) error { return s.list(ctx, "", fn) }

func (s *S3) list(ctx context.Context, prefix string, fn func(Info) error) error {
	ctx, cancel := context.WithCancel(ctx) // stops the listing when fn does
	defer cancel()
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return fmt.Errorf("files: list: %w", o.Err)
		}
		if err := fn(Info{Name: o.Key, Size: o.Size, Created: o.LastModified}); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// newS3Client is the minio client of cfg's endpoint.
func newS3Client(cfg S3Config) (*minio.Client, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("files: the S3 endpoint must be an http(s) URL with no path, got %q", cfg.Endpoint)
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: u.Scheme == "https", Region: cfg.Region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("files: S3 client: %w", err)
	}
	return client, nil
}
