package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestOpenAPIDescribesWatchLines: the OpenAPI document describes the lines GET
// /v1/events:watch sends. They are {"type":"ADDED","object":{…}} (README),
// but the document said each line is grpc-gateway's envelope
// {"result":{…},"error":{…}}: a client generated from it finds no result.
func TestOpenAPIDescribesWatchLines(t *testing.T) {
	tg := startGateway(t, nil)
	code, _, doc := restDo(t, http.MethodGet, tg.httpURL+"/openapi.json", "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d", code)
	}
	paths, _ := doc["paths"].(map[string]any)
	watch, _ := paths["/v1/events:watch"].(map[string]any)
	get, _ := watch["get"].(map[string]any)
	responses, _ := get["responses"].(map[string]any)
	ok, _ := responses["200"].(map[string]any)
	schema, _ := ok["schema"].(map[string]any)
	if ref, _ := schema["$ref"].(string); ref == "#/definitions/v1StreamWatchResponse" {
		return
	}
	props, _ := schema["properties"].(map[string]any)
	if props["type"] == nil || props["object"] == nil {
		t.Errorf("the watch's 200 lines are documented as %v, want their own type and object", schema)
	}
	// The lines really are so.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	emit(t, tg.client, testEvent("Doc", "Pod", "ns", "d"))
	resp, lines := ndjsonWatch(t, ctx, tg.httpURL+"/v1/events:watch?resourceVersion=0")
	defer resp.Body.Close()
	if l := <-lines; l["type"] != "ADDED" || l["object"] == nil || l["result"] != nil {
		t.Fatalf("watch line %v", l)
	}
}
