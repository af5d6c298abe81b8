package reference

// Bank is a Nigerian bank a payout can go to.
type Bank struct {
	Name string `json:"name"`
	Code string `json:"code"`
}

// Banks are the most used Nigerian commercial and microfinance banks with
// their CBN codes (the 3-digit codes take part in the NUBAN check digit).
var Banks = []Bank{
	{Name: "Access Bank", Code: "044"},
	{Name: "Citibank Nigeria", Code: "023"},
	{Name: "Ecobank Nigeria", Code: "050"},
	{Name: "Fidelity Bank", Code: "070"},
	{Name: "First Bank of Nigeria", Code: "011"},
	{Name: "First City Monument Bank", Code: "214"},
	{Name: "Globus Bank", Code: "103"},
	{Name: "Guaranty Trust Bank", Code: "058"},
	{Name: "Heritage Bank", Code: "030"},
	{Name: "Keystone Bank", Code: "082"},
	{Name: "Polaris Bank", Code: "076"},
	{Name: "Providus Bank", Code: "101"},
	{Name: "Stanbic IBTC Bank", Code: "221"},
	{Name: "Standard Chartered Bank", Code: "068"},
	{Name: "Sterling Bank", Code: "232"},
	{Name: "SunTrust Bank", Code: "100"},
	{Name: "Titan Trust Bank", Code: "102"},
	{Name: "Union Bank of Nigeria", Code: "032"},
	{Name: "United Bank For Africa", Code: "033"},
	{Name: "Unity Bank", Code: "215"},
	{Name: "Wema Bank", Code: "035"},
	{Name: "Zenith Bank", Code: "057"},
	{Name: "Kuda Microfinance Bank", Code: "090267"},
	{Name: "Moniepoint Microfinance Bank", Code: "090405"},
	{Name: "OPay Digital Services (Paycom)", Code: "100004"},
	{Name: "PalmPay", Code: "100033"},
	{Name: "VFD Microfinance Bank", Code: "090110"},
	{Name: "Rubies Microfinance Bank", Code: "090175"},
}

// FindBank returns the bank with code.
func FindBank(code string) (Bank, bool) {
	for _, b := range Banks {
		if b.Code == code {
			return b, true
		}
	}
	return Bank{}, false
}
