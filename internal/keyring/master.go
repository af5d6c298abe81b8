// Package keyring is envelope encryption for the secret and personal data
// the service keeps: each subject (a customer, a merchant) has its own
// AES-256 data key, stored in PostgreSQL only wrapped by a master key that
// is kept outside the database, in a file. Data is sealed with AES-256-GCM
// under its subject's key; destroying that key makes everything sealed
// with it unreadable, so a customer can be forgotten although the event
// log is never rewritten. A new master key re-wraps the data keys without
// touching what they sealed. Blind indexes (keyed hashes) let read models
// look values up without holding them in plain text.
package keyring

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// keySize is the size of every key here: AES-256.
const keySize = 32

// Master is a master key: it wraps the data keys and never leaves the
// process.
type Master struct {
	id   string
	aead cipher.AEAD
}

// ID names the master key without revealing it: the first 8 bytes of the
// SHA-256 of a fixed label and the key, in hex. A wrapped data key records
// the ID of the master that wrapped it.
func (m Master) ID() string { return m.id }

// NewMaster is the master key of 32 raw bytes.
func NewMaster(key []byte) (Master, error) {
	if len(key) != keySize {
		return Master{}, fmt.Errorf("a master key is %d bytes, got %d", keySize, len(key))
	}
	aead, err := newAEAD(key)
	if err != nil {
		return Master{}, err
	}
	sum := sha256.Sum256(append([]byte("escrowd master key id\x00"), key...))
	return Master{id: hex.EncodeToString(sum[:8]), aead: aead}, nil
}

// LoadMaster reads a master key file: 32 random bytes, base64 encoded
// (surrounding whitespace is ignored).
func LoadMaster(path string) (Master, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Master{}, fmt.Errorf("reading the master key: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return Master{}, fmt.Errorf("the master key file %s is not base64", path)
	}
	m, err := NewMaster(key)
	if err != nil {
		return Master{}, fmt.Errorf("the master key file %s: %w", path, err)
	}
	return m, nil
}

// GenerateMaster is a new random master key, kept nowhere: for a process
// whose sealed data lives no longer than it (a test, a benchmark).
func GenerateMaster() (Master, error) {
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return Master{}, err
	}
	return NewMaster(key)
}

// CreateMasterFile writes a new random master key to path, readable by its
// owner only, and refuses to replace an existing file (a lost master key
// is every sealed value lost).
func CreateMasterFile(path string) error {
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// seal encrypts plaintext with a fresh random nonce, bound to aad; the
// result is the nonce followed by the ciphertext and its tag.
func seal(aead cipher.AEAD, plaintext, aad []byte) []byte {
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // the system's random source failed: nothing may be sealed
	}
	return aead.Seal(nonce, nonce, plaintext, aad)
}

// errTampered is an opening that failed authentication.
var errTampered = errors.New("keyring: the sealed value does not open with its key (altered, or another subject's)")

func open(aead cipher.AEAD, sealed, aad []byte) ([]byte, error) {
	n := aead.NonceSize()
	if len(sealed) < n+aead.Overhead() {
		return nil, errTampered
	}
	out, err := aead.Open(nil, sealed[:n], sealed[n:], aad)
	if err != nil {
		return nil, errTampered
	}
	return out, nil
}

// wrapAAD binds a wrapped data key to its subject, so that one subject's
// wrapped key copied onto another's row does not open.
func wrapAAD(subject string) []byte { return []byte("escrowd data key\x00" + subject) }

func (m Master) wrap(subject string, key []byte) []byte { return seal(m.aead, key, wrapAAD(subject)) }

func (m Master) unwrap(subject string, wrapped []byte) ([]byte, error) {
	key, err := open(m.aead, wrapped, wrapAAD(subject))
	if err != nil {
		return nil, fmt.Errorf("keyring: the data key of %s does not unwrap with master key %s", subject, m.id)
	}
	return key, nil
}
