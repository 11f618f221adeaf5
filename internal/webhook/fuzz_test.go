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

// FuzzCloudEventBatchItem: whatever an element of a CloudEvents batch holds,
// it is either refused with violations of its own attributes or converted
// to an event with a uid, a reason and the CloudEvent's id and source kept;
// nothing panics.
func FuzzCloudEventBatchItem(f *testing.F) {
	f.Add(`{"specversion":"1.0","id":"1","source":"/s","type":"com.example.t","subject":"a","regardingkind":"Order","eventtype":"Warning","region":"eu"}`)
	f.Add(`{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"application/json","data":{"a":[1,2]}}`)
	f.Add(`{"specversion":"1.0","id":"1","source":"/s","type":"t","data_base64":"AAE="}`)
	f.Add(`{"specversion":"0.3","id":"1","source":"/s","type":"t","datacontentencoding":"base64","data":"AAE="}`)
	f.Add(`{"specversion":"1.0","id":" ","source":"","type":"t","time":"x"}`)
	f.Add(`[]`)
	f.Add(`null`)
	h := &handler{opts: Options{MaxNoteBytes: 64}}
	f.Fuzz(func(t *testing.T, raw string) {
		it := h.ceBatchItem(0, []byte(raw), nil)
		if it.err != nil {
			if len(it.err.GetFieldViolations()) == 0 {
				t.Fatal("a refused element names no attribute")
			}
			for _, v := range it.err.GetFieldViolations() {
				if !strings.HasPrefix(v.GetField(), "[0]") {
					t.Fatalf("violation of %q outside the element", v.GetField())
				}
			}
			return
		}
		if it.ev == nil || it.field == nil || it.ev.Uid == "" || it.ev.Reason == "" || it.ev.Regarding.GetName() == "" {
			t.Fatalf("an accepted element has no event: %v", it.ev)
		}
		if it.ev.Annotations[CEIDAnnotation] == "" || it.ev.Annotations[CESourceAnnotation] == "" {
			t.Fatalf("id or source not kept: %v", it.ev.Annotations)
		}
		if len(it.ev.Note) > 64 {
			t.Fatalf("note of %d bytes over the limit", len(it.ev.Note))
		}
	})
}
