package api

import (
	"context"
	"strconv"
	"time"
)

// The real-time channel routes (docs/rtchan.md "Host-wide
// admission"): the daemon admits every channel on the host with the rtchan
// D_order test, so that processes together never over-commit a link.
const (
	RouteRTChannels     = "GET /v1/rtchannels"
	RouteRTChannel      = "GET /v1/rtchannels/{id}"
	RouteAdmitRTChannel = "POST /v1/rtchannels"
	RouteCloseRTChannel = "DELETE /v1/rtchannels/{id}"
)

// RTChannelRequest asks for a real-time channel on a managed link: at most
// one message of MessageBytes every Period, bursts of Burst messages, each
// delivered within Delay of its logical arrival.
type RTChannelRequest struct {
	Name string `json:"name,omitempty"`
	Link string `json:"link"`
	// Destination is the receiver, "ip:port" (optional): where the
	// channel's messages go, shown with the channel.
	Destination  string        `json:"destination,omitempty"`
	MessageBytes int           `json:"message_bytes"`
	Period       time.Duration `json:"period_ns"`
	Burst        int           `json:"burst"`
	Delay        time.Duration `json:"delay_ns"`
}

// RTChannel is an admitted channel with its owner and its bound figures
// (rtchan.ChannelBound, recomputed for the link's current set).
type RTChannel struct {
	ID           uint64        `json:"id"`
	Name         string        `json:"name"`
	Link         string        `json:"link"`
	Destination  string        `json:"destination,omitempty"`
	PID          int           `json:"pid"`
	UID          uint32        `json:"uid"`
	Exe          string        `json:"exe"`
	MessageBytes int           `json:"message_bytes"`
	Period       time.Duration `json:"period_ns"`
	Burst        int           `json:"burst"`
	Delay        time.Duration `json:"delay_ns"`
	Since        time.Time     `json:"since"`
	// Priority is the channel's D_order priority on its link (0 highest).
	Priority int `json:"priority"`
	// Ts, Tw: message service and wait time; Bound: the local delay bound
	// (Delay minus the network's share); Response: the worst-case response
	// time, never above Bound.
	Ts       time.Duration `json:"ts_ns"`
	Tw       time.Duration `json:"tw_ns"`
	Bound    time.Duration `json:"bound_ns"`
	Response time.Duration `json:"response_ns"`
}

// RTChannelsAPI is the client of the channel routes.
type RTChannelsAPI interface {
	List(ctx context.Context) ([]RTChannel, error)
	Get(ctx context.Context, id uint64) (RTChannel, error)
	// Admit asks for a channel owned by the calling process: it is released
	// when that process exits, or by Close.
	Admit(ctx context.Context, req RTChannelRequest) (RTChannel, error)
	Close(ctx context.Context, id uint64) error
}

// RTChannels returns the client of the channel routes.
func (c *Client) RTChannels() RTChannelsAPI { return &rtClient{c} }

type rtClient struct{ c *Client }

func (r *rtClient) List(ctx context.Context) ([]RTChannel, error) {
	var out []RTChannel
	err := r.c.call(ctx, RouteRTChannels, nil, nil, &out, nil)
	return out, err
}

func (r *rtClient) Get(ctx context.Context, id uint64) (RTChannel, error) {
	var out RTChannel
	err := r.c.call(ctx, RouteRTChannel, []string{strconv.FormatUint(id, 10)}, nil, &out, nil)
	return out, err
}

func (r *rtClient) Admit(ctx context.Context, req RTChannelRequest) (RTChannel, error) {
	var out RTChannel
	err := r.c.call(ctx, RouteAdmitRTChannel, nil, req, &out, nil)
	return out, err
}

func (r *rtClient) Close(ctx context.Context, id uint64) error {
	return r.c.call(ctx, RouteCloseRTChannel, []string{strconv.FormatUint(id, 10)}, nil, nil, nil)
}
