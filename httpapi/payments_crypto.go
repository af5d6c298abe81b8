package httpapi

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"

	"github.com/labstack/echo/v4"
	"github.com/skip2/go-qrcode"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/whitelist"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/projections"
)

// cryptoRoutes: the platform's BSC deposit address, customers' withdrawal
// address whitelists, and the retired virtual-account route.
func (s *Server) cryptoRoutes() {
	cust := Policy{CID: CIDRequired}
	s.handle(http.MethodGet, "/v1/whitelist-address", cust, s.listWhitelist)
	s.handle(http.MethodPost, "/v1/whitelist-address", cust, s.addWhitelist)
	s.handle(http.MethodDelete, "/v1/whitelist-address/:addressId", cust, s.removeWhitelist)
	s.handle(http.MethodGet, "/v1/payment/get-master-wallet-address", Policy{CID: CIDIgnored}, s.masterWallet)
	s.handle(http.MethodGet, "/v1/payment/deposit/wallet", Policy{CID: CIDIgnored}, s.masterWallet)
	s.handle(http.MethodPost, "/v1/payment/virtual-account", Policy{CID: CIDIgnored}, s.virtualAccount)
}

// bscNetworks are the chain id and explorer of BSC per environment.
var bscNetworks = map[domain.Environment]struct {
	id       int
	explorer string
}{
	domain.Test: {97, "https://testnet.bscscan.com/address/"},
	domain.Live: {56, "https://bscscan.com/address/"},
}

// masterWalletInstructions tell a depositor what the address accepts.
const masterWalletInstructions = "Send only BEP-20 tokens on BNB Smart Chain (BSC) to this address; " +
	"tokens sent on any other network are lost. The sending address must first be whitelisted " +
	"(POST /v1/whitelist-address), or the deposit cannot be credited."

// masterWalletQRSize is the QR code's width and height in pixels.
const masterWalletQRSize = 256

// masterWalletQR is the master address as a data:image/png;base64 QR code,
// made once per address (the addresses are configuration).
func masterWalletQR(addr string) (string, error) {
	png, err := qrcode.Encode(addr, qrcode.Medium, masterWalletQRSize)
	if err != nil {
		return "", fmt.Errorf("master wallet QR code: %w", err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(png), nil
}

func (s *Server) masterWallet(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	addr := s.cfg.BSCMasterAddress[p.Environment]
	nw, ok := bscNetworks[p.Environment]
	if addr == "" || !ok || !app.ChainWatched(p.Environment) {
		// No master address for the environment, or nothing watching its
		// chain to credit what is sent there.
		return app.ErrCryptoNotConfigured
	}
	qr, err := s.masterQR.get(addr)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Master wallet address fetched successfully", map[string]any{
		"address": addr, "walletAddress": addr, "network": whitelist.NetworkBSC, "networkId": nw.id,
		"explorerUrl": nw.explorer + addr, "qrCode": qr, "instructions": masterWalletInstructions})
}

// qrCache keeps each address's QR code: encoding one costs about a
// millisecond of CPU, which an unauthenticated-cost route should not pay
// per request.
type qrCache struct{ m sync.Map }

func (q *qrCache) get(addr string) (string, error) {
	if v, ok := q.m.Load(addr); ok {
		return v.(string), nil
	}
	qr, err := masterWalletQR(addr)
	if err != nil {
		return "", err
	}
	q.m.Store(addr, qr)
	return qr, nil
}

func (s *Server) virtualAccount(c echo.Context) error {
	return &domain.Error{Code: domain.Gone, Message: "Virtual accounts are no longer issued. Create an escrow, collect payment " +
		"with POST /v1/payment/create-intent, then confirm it with POST /v1/payment/verify"}
}

func (s *Server) listWhitelist(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	cu, _ := CustomerFrom(c)
	q, err := s.readModels(c, projections.WhitelistName)
	if err != nil {
		return err
	}
	list, err := q.WhitelistAddresses(c.Request().Context(), p.MerchantID, p.Environment, cu.ID)
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Whitelisted addresses fetched successfully", list)
}

func (s *Server) addWhitelist(c echo.Context) error {
	var body struct {
		WalletAddress string `json:"walletAddress"`
		Network       string `json:"network"`
		Label         string `json:"label"`
		OTP           any    `json:"otp"` // accepted and ignored
	}
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	cu, _ := CustomerFrom(c)
	a, pos, err := s.app.AddWhitelistAddress(c.Request().Context(), actor(c), cu.ID,
		whitelist.NewAddress{WalletAddress: body.WalletAddress, Network: body.Network, Label: body.Label})
	if err != nil {
		return err
	}
	return s.respondWhitelisted(c, cu.ID, a.ID, pos, http.StatusCreated, "Wallet address whitelisted successfully")
}

func (s *Server) removeWhitelist(c echo.Context) error {
	cu, _ := CustomerFrom(c)
	a, pos, err := s.app.RemoveWhitelistAddress(c.Request().Context(), actor(c), cu.ID, c.Param("addressId"))
	if err != nil {
		return err
	}
	return s.respondWhitelisted(c, cu.ID, a.ID, pos, http.StatusOK, "Wallet address removed successfully")
}

// respondWhitelisted answers a write with the address as the read model
// holds it once it includes the write.
func (s *Server) respondWhitelisted(c echo.Context, customerID, addressID string, pos eventstore.Position, status int, msg string) error {
	if err := s.awaitWrite(c, pos, projections.WhitelistName); err != nil {
		return err
	}
	q, err := s.readModels(c, projections.WhitelistName)
	if err != nil {
		return err
	}
	a, ok, err := q.WhitelistAddressByID(c.Request().Context(), customerID, addressID)
	if err != nil {
		return err
	}
	if !ok {
		return domain.Errorf(domain.NotFound, "Address not found")
	}
	return respond(c, status, msg, a)
}
