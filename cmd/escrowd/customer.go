package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/escrowd/escrowd/domain/customer"
	"github.com/escrowd/escrowd/internal/app"
	"github.com/escrowd/escrowd/internal/keyring"
)

var customerForgetCommand = &command{
	name: "customer forget", args: "--merchant M --customer C",
	summary: "erase a customer's personal data: destroy their data key; their money records stay",
	detail: "The customer's personal fields (names, email, phone, BVN, date of birth, bank accounts, addresses)\n" +
		"are sealed in the log with a data key of their own: destroying it erases them for good, in the\n" +
		"log, in backups of it and in every read model rebuilt from it. Amounts, references and times stay,\n" +
		"so balances and the audit are unchanged. The erasure is an event of the customer's (customer.erased,\n" +
		"the operator as its actor), recorded after the key is marked for destruction (no process caches it\n" +
		"then) and before it is destroyed; it frees their email and phone for a\n" +
		"new registration. Running escrowd processes read it from the log and show \"[erased]\" for the\n" +
		"personal fields at once, with no rebuild or restart. There is no undo.",
	database: true,
	required: []string{"merchant", "customer"},
	define: func(fs *flag.FlagSet) runFunc {
		merchantID := fs.String("merchant", "", "merchant id (required)")
		customerID := fs.String("customer", "", "customer id (required)")
		return func(ctx context.Context, inv *invocation) error {
			return customerForget(ctx, inv.env, *merchantID, *customerID)
		}
	},
}

func customerForget(ctx context.Context, env *cliEnv, merchantID, customerID string) error {
	return eraseCustomer(ctx, env, merchantID, customerID, func() {})
}

// eraseCustomer is customer forget; recorded runs between the erasure's
// record and the key's destruction (a test starts a process there).
func eraseCustomer(ctx context.Context, env *cliEnv, merchantID, customerID string, recorded func()) error {
	created, err := ownsCustomer(ctx, env, merchantID, customerID)
	if err != nil {
		return err
	}
	// The key is marked first, so no process caches it any longer (one
	// that starts after the record reads the log from after it), then the
	// erasure is recorded, the operator as its actor (the event holds
	// nothing personal): a key destroyed with no record of why would read
	// as lost data. Run again after a failure, it records nothing more.
	if err := env.Keyring.PrepareDestroy(ctx, keyring.Customer(customerID)); err != nil {
		return err
	}
	if _, err := service(env).RecordErasure(ctx, app.Actor{MerchantID: merchantID, Environment: created.Environment}, customerID); err != nil {
		return fmt.Errorf("record the erasure of customer %s: %w", customerID, err)
	}
	recorded()
	if _, err := env.Keyring.Destroy(ctx, keyring.Customer(customerID)); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "customer %s of merchant %s forgotten: erasure recorded, email and phone released, data key destroyed\n", customerID, merchantID)
	return nil
}

// ownsCustomer checks that customer id is one of merchant's, and returns
// its creation.
func ownsCustomer(ctx context.Context, env *cliEnv, merchantID, customerID string) (customer.Created, error) {
	events, err := env.Store.ReadStream(ctx, app.CustomerKind.StreamName(customerID), 0, 1)
	if err != nil {
		return customer.Created{}, err
	}
	if len(events) == 1 {
		ev, err := customer.Registry.Decode(events[0].Type, events[0].Data)
		if err != nil {
			return customer.Created{}, err
		}
		if c, ok := ev.(customer.Created); ok && c.MerchantID == merchantID {
			return c, nil
		}
	}
	return customer.Created{}, errors.New("Customer not found")
}
