package job

import (
	"testing"

	"github.com/sandboxer/sandboxer/internal/tenant"
)

func jobOf(t string) *liveJob { return &liveJob{owner: tenant.Tenant{Name: t}} }

// TestSlotsShares (THREATS 108): one tenant holding every slot it can never
// takes another's share; within its share a tenant starts at once; slots
// nobody is guaranteed are first come; without shares it is one pool.
func TestSlotsShares(t *testing.T) {
	s := newSlots(4, map[string]int{"alice": 1, "bob": 1})
	for i := 0; i < 2; i++ {
		if !s.canTake("alice") {
			t.Fatalf("alice's job %d within her share refused", i)
		}
		s.take("alice")
	}
	if s.canTake("alice") {
		t.Fatal("alice took a slot of bob's share")
	}
	if !s.canTake("bob") {
		t.Fatal("bob's job within his share refused while alice holds hers")
	}
	s.take("bob")
	queue := []*liveJob{jobOf("alice"), jobOf("alice"), jobOf("bob")}
	if i := s.next(queue); i != 2 {
		t.Fatalf("next picks %d, want bob's (within his share) before alice's older ones", i)
	}
	// Weights: 3 to 1 of 4 slots.
	w := newSlots(4, map[string]int{"big": 3, "small": 1})
	if w.shares["big"] != 3 || w.shares["small"] != 1 {
		t.Fatalf("shares %v", w.shares)
	}
	// More tenants than slots: nobody is guaranteed, everything is first come.
	many := newSlots(2, map[string]int{"a": 1, "b": 1, "c": 1})
	many.take("a")
	if !many.canTake("a") {
		t.Fatal("with no share guaranteed, a free slot is anyone's")
	}
	many.take("a")
	if many.canTake("b") {
		t.Fatal("more than max_concurrent")
	}
	// One pool without shares.
	p := newSlots(2, nil)
	p.take("")
	p.take("")
	if p.canTake("") || p.why("") == "" {
		t.Fatal("a full pool takes more, or cannot say why")
	}
	p.give("")
	if !p.canTake("") {
		t.Fatal("a freed slot is not taken")
	}
}
