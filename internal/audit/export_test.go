package audit

// HoldNoRecords makes every replay write its records after each page
// (none held), so that a record changed in a later page is read back from
// the table, until the returned function puts the hold back.
func HoldNoRecords() (restore func()) {
	was := recordHold
	recordHold = 0
	return func() { recordHold = was }
}
