package audit

// HoldNoRecords makes every replay write its records after each page
// (none held), so that a record changed in a later page is read back from
// the table, until the returned function puts the hold back.
func HoldNoRecords() (restore func()) {
	was := recordHold
	recordHold = 0
	return func() { recordHold = was }
}

// ComparedInFull collects the ids the next audits compare in full (their
// digests differ), until the returned function stops it.
func ComparedInFull() (ids *[]string, stop func()) {
	var got []string
	was := comparedInFull
	comparedInFull = func(ids []string) { got = append(got, ids...) }
	return &got, func() { comparedInFull = was }
}
