package problem_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/platform/problem"
)

func TestError_IsMatchesByCode(t *testing.T) {
	sentinel := problem.New(problem.OutOfStock, "not enough stock")
	precise := fmt.Errorf("create order: %w", problem.Errorf(problem.OutOfStock, "SKU-1: %d available, %d requested", 0, 2))
	if !errors.Is(precise, sentinel) {
		t.Fatal("a wrapped copy with another detail does not match its sentinel")
	}
	if errors.Is(precise, problem.New(problem.NotFound, "")) {
		t.Fatal("an out_of_stock matches not_found")
	}
	if got := problem.CodeOf(precise); got != problem.OutOfStock {
		t.Fatalf("CodeOf = %q", got)
	}
	if got := problem.CodeOf(errors.New("plain")); got != "" {
		t.Fatalf("CodeOf(plain) = %q, want empty", got)
	}
	if precise.Error() != "create order: out_of_stock: SKU-1: 0 available, 2 requested" {
		t.Fatalf("Error() = %q", precise.Error())
	}
}

func TestTransient(t *testing.T) {
	busy := &problem.Error{Code: problem.ResourceBusy, RetryAfter: time.Second}
	if !problem.Transient(fmt.Errorf("lock: %w", busy)) {
		t.Fatal("a refusal with Retry-After is not transient")
	}
	if problem.Transient(problem.New(problem.OutOfStock, "")) || problem.Transient(errors.New("x")) {
		t.Fatal("a final refusal or a plain error is transient")
	}
}
