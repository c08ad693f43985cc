package lab_test

import (
	"testing"

	"github.com/shop-example/shop/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
