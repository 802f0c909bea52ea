package api

// Envelope is the success body of every answer: {"status":"success","data":{...}}.
// It is generic so the OpenAPI document shows the real schema of each data object.
type Envelope[T any] struct {
	Status string `json:"status" enum:"success" doc:"Always \"success\"."`
	Data   T      `json:"data"`
}

// Response is a Huma output with an enveloped body.
type Response[T any] struct {
	Body Envelope[T]
}

func respond[T any](data T) *Response[T] {
	return &Response[T]{Body: Envelope[T]{Status: "success", Data: data}}
}
