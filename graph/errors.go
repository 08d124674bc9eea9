package graph

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/baton-go/baton/core/config"
)

var (
	// ErrInvalidOptions is returned, wrapped with the field and the reason,
	// by the constructors for configuration they cannot run with.
	ErrInvalidOptions = errors.New("baton/graph: invalid options")

	// ErrInvalidPayload is returned, wrapped with the field and the reason,
	// for a lane payload that must not be enqueued. A processor parks an
	// entry whose payload fails the same check.
	ErrInvalidPayload = errors.New("baton/graph: invalid payload")

	// ErrInvalidArgument is returned, wrapped with the reason, by a client
	// method called with arguments the engine would refuse anyway; nothing
	// is sent.
	ErrInvalidArgument = errors.New("baton/graph: invalid argument")

	// ErrInvalidResponse is returned, wrapped with the reason, when the
	// engine answered 2xx with a body that does not decode or breaks the
	// contract (for example a permission bit outside 0..63).
	ErrInvalidResponse = errors.New("baton/graph: invalid response")
)

// StatusError is the error of a client call the engine answered with a
// status other than 2xx. Match it with errors.As:
//
//	var se *graph.StatusError
//	if errors.As(err, &se) && se.StatusCode == http.StatusConflict { … }
type StatusError struct {
	// StatusCode is the HTTP status the engine answered.
	StatusCode int
	// Body is the start of the response body (at most DefaultBodyExcerpt
	// bytes for clients, ProcessorOptions.BodyExcerpt for processors), for
	// diagnosis; it may be cut.
	Body string
	// Path is the request path, without the base URL.
	Path string
	// Method is the request method.
	Method string
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("baton/graph: %s %s: %d %s", e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

func invalidOptions(field, format string, args ...any) error {
	return config.Invalid(ErrInvalidOptions, field, format, args...)
}

func invalidPayload(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidPayload, fmt.Sprintf(format, args...))
}

func invalidArgument(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

func invalidResponse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidResponse, fmt.Sprintf(format, args...))
}
