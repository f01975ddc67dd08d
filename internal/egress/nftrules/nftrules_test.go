package nftrules

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/nftables"

	"github.com/airlockdev/airlock/internal/egress/netnstest"
)

var testCfg = Config{ProxyPort: 15001, ResolverPort: 15053}

func tablesOf(t *testing.T, c *nftables.Conn) []string {
	t.Helper()
	ts, err := c.ListTables()
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	var names []string
	for _, tb := range ts {
		names = append(names, tb.Name)
	}
	slices.Sort(names)
	return names
}

func TestEnsureIdempotentAndRemove(t *testing.T) {
	ns := netnstest.New(t)
	c := ns.Conn(t)

	// Someone else's table: must survive everything below.
	other := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "other"})
	c.AddChain(&nftables.Chain{Name: "in", Table: other, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}

	if _, err := Sandboxes(c); !errors.Is(err, ErrNoTable) {
		t.Fatalf("Sandboxes without a table: %v, want ErrNoTable", err)
	}
	if err := AddSandbox(c, "veth0"); !errors.Is(err, ErrNoTable) {
		t.Fatalf("AddSandbox without a table: %v, want ErrNoTable", err)
	}
	if err := Ensure(c, Config{}); err == nil {
		t.Fatal("Ensure accepted zero ports")
	}

	for i := range 2 {
		if err := Ensure(c, testCfg); err != nil {
			t.Fatalf("Ensure #%d: %v", i+1, err)
		}
		if got := tablesOf(t, c); !slices.Equal(got, []string{TableName, "other"}) {
			t.Fatalf("after Ensure #%d tables are %v", i+1, got)
		}
		if err := Check(c, testCfg); err != nil {
			t.Fatalf("Check after Ensure #%d: %v", i+1, err)
		}
	}
	// The rules are what was asked for, read back from the kernel.
	tb := &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	counts := map[string]int{}
	for _, name := range []string{AntispoofName, PreroutingName, InputName, ForwardName} {
		rules, err := c.GetRules(tb, &nftables.Chain{Name: name, Table: tb})
		if err != nil {
			t.Fatal(err)
		}
		counts[name] = len(rules)
	}
	if counts[AntispoofName] != 1 || counts[PreroutingName] != 3 || counts[InputName] != 10 || counts[ForwardName] != 2 {
		t.Fatalf("rule counts %v", counts)
	}
	if err := Check(c, Config{ProxyPort: 1, ResolverPort: 2}); err == nil {
		t.Fatal("Check passed for other ports")
	}

	// Sandboxes are set elements; adding and removing is idempotent.
	for _, n := range []string{"sbx-b", "sbx-a", "sbx-a"} {
		if err := AddSandbox(c, n); err != nil {
			t.Fatalf("AddSandbox %s: %v", n, err)
		}
	}
	if got, err := Sandboxes(c); err != nil || !slices.Equal(got, []string{"sbx-a", "sbx-b"}) {
		t.Fatalf("Sandboxes = %v, %v", got, err)
	}
	for _, n := range []string{"sbx-b", "sbx-b", "never-added"} {
		if err := RemoveSandbox(c, n); err != nil {
			t.Fatalf("RemoveSandbox %s: %v", n, err)
		}
	}
	if got, err := Sandboxes(c); err != nil || !slices.Equal(got, []string{"sbx-a"}) {
		t.Fatalf("Sandboxes = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0123456789abcdef", "a/b"} {
		if err := AddSandbox(c, bad); err == nil {
			t.Errorf("AddSandbox(%q) accepted", bad)
		}
	}

	// Repair: a lost rule and a changed port are put right; the sandboxes stay.
	rules, err := c.GetRules(tb, &nftables.Chain{Name: InputName, Table: tb})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DelRule(rules[len(rules)-1]); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := Check(c, testCfg); err == nil {
		t.Fatal("Check passed with the drop rule deleted")
	}
	if err := Ensure(c, testCfg); err != nil {
		t.Fatalf("Ensure (repair): %v", err)
	}
	cfg2 := Config{ProxyPort: 16001, ResolverPort: 16053}
	if err := Ensure(c, cfg2); err != nil {
		t.Fatalf("Ensure (new ports): %v", err)
	}
	if err := Check(c, cfg2); err != nil {
		t.Fatal(err)
	}
	if got, err := Sandboxes(c); err != nil || !slices.Equal(got, []string{"sbx-a"}) {
		t.Fatalf("Sandboxes after repair = %v, %v", got, err)
	}
	if got := tablesOf(t, c); !slices.Equal(got, []string{TableName, "other"}) {
		t.Fatalf("after repair tables are %v", got)
	}

	for i := range 2 {
		if err := Remove(c); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	if got := tablesOf(t, c); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("after Remove tables are %v", got)
	}
}

func TestEnsureRepairsForeignTable(t *testing.T) {
	ns := netnstest.New(t)
	c := ns.Conn(t)
	// A table of our name with none of our objects (a half-made table, or someone else's).
	tb := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: TableName})
	c.AddChain(&nftables.Chain{Name: "stray", Table: tb, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter})
	wrong := &nftables.Set{Table: tb, Name: SandboxSet, KeyType: nftables.TypeIPAddr}
	if err := c.AddSet(wrong, []nftables.SetElement{{Key: []byte{10, 0, 0, 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := Check(c, testCfg); err == nil {
		t.Fatal("Check passed on a foreign table")
	}
	if err := Ensure(c, testCfg); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if err := Check(c, testCfg); err != nil {
		t.Fatal(err)
	}
	if got, err := Sandboxes(c); err != nil || len(got) != 0 {
		t.Fatalf("Sandboxes = %v, %v", got, err)
	}
	if err := Remove(c); err != nil {
		t.Fatal(err)
	}
}
