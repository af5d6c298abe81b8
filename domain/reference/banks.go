package reference

// Bank is a Nigerian bank a payout can go to.
type Bank struct {
	Name string `json:"name"`
	// Code is the bank's CBN code: 3 digits for a deposit money bank, the
	// code that takes part in its NUBAN check digit. The other financial
	// institutions of the list (microfinance banks and mobile money
	// operators) have no 3-digit code: theirs is their 6-digit NIP code,
	// which is also what their NUBANs are computed with here.
	Code string `json:"code"`
	// NIPCode is the bank's 6-digit NIBSS Instant Payment institution code
	// (000013 for GTBank's 058), which clients written for NIP send as
	// bankCode.
	NIPCode string `json:"nipCode"`
}

// Banks are the most used Nigerian commercial and microfinance banks with
// their CBN and NIP codes. Each NIP code was checked against published NIP
// institution lists (NIBSS FinancialInstitutionList dumps and bank lists of
// payment integrations that carry both codes), not guessed.
var Banks = []Bank{
	{Name: "Access Bank", Code: "044", NIPCode: "000014"},
	{Name: "Citibank Nigeria", Code: "023", NIPCode: "000009"},
	{Name: "Ecobank Nigeria", Code: "050", NIPCode: "000010"},
	{Name: "Fidelity Bank", Code: "070", NIPCode: "000007"},
	{Name: "First Bank of Nigeria", Code: "011", NIPCode: "000016"},
	{Name: "First City Monument Bank", Code: "214", NIPCode: "000003"},
	{Name: "Globus Bank", Code: "103", NIPCode: "000027"},
	{Name: "Guaranty Trust Bank", Code: "058", NIPCode: "000013"},
	{Name: "Heritage Bank", Code: "030", NIPCode: "000020"},
	{Name: "Keystone Bank", Code: "082", NIPCode: "000002"},
	{Name: "Polaris Bank", Code: "076", NIPCode: "000008"},
	{Name: "Providus Bank", Code: "101", NIPCode: "000023"},
	{Name: "Stanbic IBTC Bank", Code: "221", NIPCode: "000012"},
	{Name: "Standard Chartered Bank", Code: "068", NIPCode: "000021"},
	{Name: "Sterling Bank", Code: "232", NIPCode: "000001"},
	{Name: "SunTrust Bank", Code: "100", NIPCode: "000022"},
	{Name: "Titan Trust Bank", Code: "102", NIPCode: "000025"},
	{Name: "Union Bank of Nigeria", Code: "032", NIPCode: "000018"},
	{Name: "United Bank For Africa", Code: "033", NIPCode: "000004"},
	{Name: "Unity Bank", Code: "215", NIPCode: "000011"},
	{Name: "Wema Bank", Code: "035", NIPCode: "000017"},
	{Name: "Zenith Bank", Code: "057", NIPCode: "000015"},
	{Name: "Kuda Microfinance Bank", Code: "090267", NIPCode: "090267"},
	{Name: "Moniepoint Microfinance Bank", Code: "090405", NIPCode: "090405"},
	{Name: "OPay Digital Services (Paycom)", Code: "100004", NIPCode: "100004"},
	{Name: "PalmPay", Code: "100033", NIPCode: "100033"},
	{Name: "VFD Microfinance Bank", Code: "090110", NIPCode: "090110"},
	{Name: "Rubies Microfinance Bank", Code: "090175", NIPCode: "090175"},
}

// FindBank returns the bank whose CBN code or NIP code is code: both name
// the same bank wherever a bankCode is taken.
func FindBank(code string) (Bank, bool) {
	for _, b := range Banks {
		if b.Code == code || b.NIPCode == code {
			return b, true
		}
	}
	return Bank{}, false
}
