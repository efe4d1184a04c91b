package api

import (
	"context"
	"time"
)

// RouteWebToken asks the daemon for a fresh login of its web view
// (docs/web.md) for the caller's user: the view then acts as that user,
// with the API's authorization.
const RouteWebToken = "POST /v1/web/token"

// WebLogin is a login of the web view: open URL (it carries Token, which
// the page turns into a cookie) before Expires.
type WebLogin struct {
	URL     string    `json:"url"`
	Base    string    `json:"base"`
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
	UID     uint32    `json:"uid"`
}

// WebToken asks for a fresh login of the web view for the caller's user.
func (c *Client) WebToken(ctx context.Context) (WebLogin, error) {
	var out WebLogin
	err := c.Do(ctx, Method(RouteWebToken), Path(RouteWebToken), struct{}{}, &out)
	return out, err
}
