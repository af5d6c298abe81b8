package ledger

import "github.com/escrowd/escrowd/domain"

// PersonalFields are r's personal fields (the people it names, their
// accounts and addresses), by their dotted path in the record's JSON. r's
// details are copied first, so the fields can be changed without touching
// the record r was copied from.
func (r *Record) PersonalFields() (paths []string, fields []*string) {
	add := func(path string, f *string) {
		paths, fields = append(paths, path), append(fields, f)
	}
	if d := r.WithdrawalDetails; d != nil {
		c := *d
		r.WithdrawalDetails = &c
		add("withdrawalDetails.accountName", &c.AccountName)
		add("withdrawalDetails.accountNumber", &c.AccountNumber)
	}
	if d := r.WalletDetails; d != nil {
		c := *d
		r.WalletDetails = &c
		add("walletDetails.phone", &c.Phone)
		add("walletDetails.customerName", &c.CustomerName)
	}
	if d := r.BlockchainDetails; d != nil {
		c := *d
		r.BlockchainDetails = &c
		add("blockchainDetails.toAddress", &c.ToAddress)
	}
	if d := r.EscrowDetails; d != nil {
		c := *d
		r.EscrowDetails = &c
		if b := c.Beneficiary; b != nil {
			cb := *b
			c.Beneficiary = &cb
			add("escrowDetails.beneficiary.name", &cb.Name)
			add("escrowDetails.beneficiary.phone", &cb.Phone)
		}
		if len(c.Escrows) > 0 {
			c.Escrows = append([]EscrowSummary(nil), c.Escrows...)
			for i := range c.Escrows {
				if b := c.Escrows[i].Beneficiary; b != nil {
					cb := *b
					c.Escrows[i].Beneficiary = &cb
					add("escrowDetails.escrows.beneficiary.name", &cb.Name)
					add("escrowDetails.escrows.beneficiary.phone", &cb.Phone)
				}
			}
		}
	}
	return paths, fields
}

// DataOwner is whose data key seals r's personal fields: r's customer's,
// or the merchant's for the merchant's own records.
func (r Record) DataOwner() domain.DataOwner {
	if r.CustomerID != "" {
		return domain.CustomerData(r.CustomerID)
	}
	return domain.MerchantData(r.MerchantID)
}
