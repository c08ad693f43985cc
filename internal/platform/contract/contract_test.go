package contract_test

import (
	"testing"

	"github.com/shop-example/shop/internal/platform/contract"
)

func TestLoad(t *testing.T) {
	s, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(s.Operations())
}
