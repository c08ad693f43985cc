package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/problem"
)

// JSON writes v as the response body with the given status.
func JSON(c echo.Context, status int, v any) error {
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	c.Response().WriteHeader(status)
	return writeJSON(c.Response(), v)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Bind decodes the request body into dst strictly. It never looks at path or
// query parameters, so a body field can never overwrite a path id (echo's
// c.Bind can). An empty body decodes as {}.
func Bind(c echo.Context, dst any) error {
	body, err := ReadBody(c)
	if err != nil {
		return err
	}
	return Decode(body, dst)
}

// ReadBody reads the whole request body, which the body-limit middleware
// caps at 64 KiB.
func ReadBody(c echo.Context) ([]byte, error) {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.Is(err, echo.ErrStatusRequestEntityTooLarge) || errors.As(err, &maxErr) {
			return nil, problem.New(problem.PayloadTooLarge, "request body is larger than 64 KiB")
		}
		return nil, problem.Errorf(problem.Invalid, "read body: %v", err)
	}
	return body, nil
}

// Decode is Bind's decoder: one JSON object whose keys match dst's json tags
// exactly (encoding/json alone would accept "SKU" for "sku" and let the last
// of two duplicate keys win), no unknown fields, no trailing data, nesting
// at most MaxNesting deep, and UTF-8 throughout (encoding/json alone would
// turn each invalid byte into U+FFFD, and the service would store a text
// the client never sent).
func Decode(body []byte, dst any) error {
	if !utf8.Valid(body) {
		return problem.Errorf(problem.Invalid, "body is not valid UTF-8 (at byte %d)", invalidUTF8At(body))
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		body = []byte("{}")
	}
	if bytes.Equal(trimmed, []byte("null")) {
		return problem.New(problem.Invalid, "body must be a JSON object, not null")
	}
	if err := checkKeys(body, reflect.TypeOf(dst)); err != nil {
		return problem.New(problem.Invalid, err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return problem.New(problem.Invalid, describeJSONError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return problem.New(problem.Invalid, "body must hold a single JSON object")
	}
	return nil
}

// invalidUTF8At is the offset of the first byte of body that does not
// begin a valid UTF-8 sequence.
func invalidUTF8At(body []byte) int {
	for i := 0; i < len(body); {
		r, n := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(body)
}

func describeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return fmt.Sprintf("body must be a JSON object, not %s", typeErr.Value)
		}
		return fmt.Sprintf("field %s: must be %s, not %s", typeErr.Field, jsonKind(typeErr.Type), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("malformed JSON at byte %d", syntaxErr.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end of body"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	return "malformed JSON"
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}
