package gatewaytest

import "github.com/shop-example/shop/harness/testenv"

// HoldBack is the gateway's pm_card_slow hold-back (Options.Sleep) that
// the test ends: testenv.HoldBack, the one hold-back of both stand-in
// providers.
type HoldBack = testenv.HoldBack

// NewHoldBack returns a hold-back that holds every slow answer until
// Release.
func NewHoldBack() *HoldBack { return testenv.NewHoldBack() }
