package webhook

import (
	"strings"
	"testing"
)

// FuzzListItem: whatever an item holds, it is either converted to an event
// of the tenant its annotations name or refused with violations of its own
// fields; nothing panics.
func FuzzListItem(f *testing.F) {
	f.Add(`{"metadata":{"annotations":{"platform.miloapis.com/scope.type":"project","platform.miloapis.com/scope.name":"shop"}},"reason":"R","regarding":{"kind":"Pod"}}`)
	f.Add(`{"metadata":{"annotations":{"eventgate.io/tenant-type":"user","platform.miloapis.com/scope.name":"x"}}}`)
	f.Add(`{"eventTime":12}`)
	f.Add(`null`)
	f.Add(`{"apiVersion":"v1","kind":"Event","series":{"count":-1}}`)
	f.Fuzz(func(t *testing.T, raw string) {
		it := listItem(0, []byte(raw), "key")
		if it.err != nil {
			for _, v := range it.err.GetFieldViolations() {
				if !strings.HasPrefix(v.GetField(), "items[0]") {
					t.Fatalf("violation of %q outside the item", v.GetField())
				}
			}
			return
		}
		if it.ev == nil || it.field == nil {
			t.Fatal("an accepted item has no event")
		}
		if (it.tenant == nil) != (it.ev.Tenant == nil) {
			t.Fatal("item and event tenants differ")
		}
		for k := range it.ev.Annotations {
			switch k {
			case ScopeTypeAnnotation, ScopeNameAnnotation, TenantTypeAnnotation, TenantNameAnnotation:
				t.Fatalf("tenant annotation %q kept", k)
			}
		}
	})
}
