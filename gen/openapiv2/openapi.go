// Package openapiv2 embeds the generated OpenAPI document of eventgate's REST API.
package openapiv2

import _ "embed"

// Document is the OpenAPI (Swagger 2.0) description of the REST API.
//
//go:embed eventgate.swagger.json
var Document []byte
