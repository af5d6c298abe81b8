package main

import (
	"strings"
	"testing"

	"github.com/escrowd/escrowd/domain"
)

func TestBSCMasterAddressConfig(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://unused")
	const addr = "0x52908400098527886E0F7030069857D2E4169EE7"
	t.Setenv("ESCROW_BSC_MASTER_ADDRESS_TEST", addr)
	t.Setenv("ESCROW_BSC_MASTER_ADDRESS_LIVE", "")
	c, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	hc := httpConfig(c)
	if hc.BSCMasterAddress[domain.Test] != addr || hc.BSCMasterAddress[domain.Live] != "" {
		t.Fatalf("http config %v", hc.BSCMasterAddress)
	}
	t.Setenv("ESCROW_BSC_MASTER_ADDRESS_LIVE", "0x1234")
	if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), "ESCROW_BSC_MASTER_ADDRESS_LIVE must be 0x followed by 40 hexadecimal characters") {
		t.Fatalf("bad live address: %v", err)
	}
}
