package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/baton-go/baton/core/outbox"
)

// WebhookNotifier returns an outbox.Notify that POSTs each notice as JSON
// (the outbox.Notice fields: kind, lane, entry_id, since, last_error,
// parked, at) to url, and fails on any status other than 2xx, so the
// driver logs the failure and tries the notice again on a later pass
// instead of stamping it as sent.
//
// url must be absolute http or https without user information or a
// fragment; unlike an engine address it may have a query, since some
// receivers take their token there. client nil means http.DefaultClient.
// Each POST is bounded by DefaultTimeout. Redirects are not followed (a
// 302 would turn the POST into a GET that proves nothing was received).
func WebhookNotifier(url string, client *http.Client) (outbox.Notify, error) {
	u, err := checkURL("WebhookNotifier url", url, true)
	if err != nil {
		return nil, err
	}
	if client == nil {
		client = http.DefaultClient
	}
	client = noRedirects(client)
	target := u.String()
	return func(ctx context.Context, n outbox.Notice) error {
		body, err := json.Marshal(n)
		if err != nil {
			return fmt.Errorf("baton/graph: encoding the notice: %w", err)
		}
		ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("baton/graph: notice webhook: %w", err)
		}
		setJSONHeaders(req.Header, true)
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("baton/graph: notice webhook: %w", unwrapURLError(err))
		}
		defer resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return statusError(resp, http.MethodPost, req.URL.Path, DefaultBodyExcerpt)
		}
		drain(resp.Body)
		return nil
	}, nil
}
