package ui

import (
	"fmt"

	tea "charm.land/bubbletea/v2"

	"bitalign/session/view"
	"bitalign/ui/keys"
	"bitalign/ui/routing"
)

// The routing view (MoE capture pairs): the grid of layers × tokens (ui/routing), the token under the cursor
// read through view.Router in the background, enter to the tensor view of the token's experts op and esc back.

// routeKey names one token of one layer.
type routeKey struct {
	layer int
	at    view.Coord
}

type routeMsg struct {
	key routeKey
	res *view.TokenRoute
	err error
}

// routeState is the routing view's detail: the token wanted, and the routes read so far.
type routeState struct {
	want    routeKey
	loading bool
	err     error
	cache   map[routeKey]*view.TokenRoute
}

// openRouting switches to the routing view (x), or back to the overview from it.
func (m *Model) openRouting() tea.Cmd {
	if m.screen == routingScreen {
		return m.setScreen(overviewScreen)
	}
	if m.rep.Routing == nil || len(m.rep.Routing.Layers) == 0 {
		m.setStatus(statusInfo, "no routing view: neither capture has a MoE layer (layers.L.mlp.experts)")
		return nil
	}
	m.fromRouting = false
	m.setStatus(statusInfo, m.rep.Routing.Summary)
	if m.rep.Routing.First != "" {
		m.setStatus(statusErr, "first flip: "+m.rep.Routing.First)
	}
	// from a MoE op's tensor view: the routing view opens on that layer and the token under the cursor
	if o := m.selected(); m.screen == tensorScreen && o != nil && o.Layer >= 0 && m.data != nil {
		if r, _, ok := m.heat.Cursor(); ok {
			at := view.Coord{Step: m.seq.Step, Seq: m.seq.Seq, Pos: m.data.Pair.Pos0 + int64(r)}
			if m.route.Locate(o.Layer, at) {
				m.setStatus(statusInfo, fmt.Sprintf("layer %d, seq %d pos %d", o.Layer, at.Seq, at.Pos))
			}
		}
	}
	return m.setScreen(routingScreen)
}

// routingKey handles a key in the routing view; handled is false for the keys the global table answers
// (export, filter, help, quit, ...).
func (m *Model) routingKey(a keys.Action, msg tea.KeyPressMsg) (tea.Cmd, bool) {
	switch a {
	case keys.Back, keys.Routing, keys.Focus:
		return m.setScreen(overviewScreen), true
	case keys.Open:
		return m.routeToOp(), true
	case keys.NextDiv, keys.PrevDiv:
		d := map[keys.Action]int{keys.NextDiv: 1, keys.PrevDiv: -1}[a]
		if !m.route.NextFlip(d) {
			m.setStatus(statusInfo, map[int]string{1: "no flip after this token", -1: "no flip before this token"}[d])
		}
		return m.ensureRoute(), true
	case keys.Up, keys.Down, keys.Left, keys.Right, keys.FastUp, keys.FastDown, keys.FastLeft, keys.FastRight,
		keys.Top, keys.Bottom, keys.First:
		m.route, _ = m.route.Update(msg)
		return m.ensureRoute(), true
	}
	return nil, false
}

// routeToOp opens the tensor view of the cursor's layer's experts op with the cursor on its token.
func (m *Model) routeToOp() tea.Cmd {
	l, at, ok := m.route.Target()
	if !ok {
		return nil
	}
	i := m.rep.FindOp(l.Op, "out")
	if i < 0 {
		m.setStatus(statusErr, l.Op+" is not in the report")
		return nil
	}
	if !m.list.Select(i) {
		m.list.SetFilter("")
		m.list.Select(i)
	}
	m.sel, m.seq, m.target, m.data = i, view.SeqKey{Step: at.Step, Seq: at.Seq}, &at, nil
	m.keepRow, m.keepCol = -1, -1
	m.fromRouting = true
	m.setStatus(statusInfo, "tensor view of "+l.Op+" at this token · esc back to the routing view")
	return m.setScreen(tensorScreen)
}

// ensureRoute reads the cursor's token's routing in the background, unless it is shown or on its way.
func (m *Model) ensureRoute() tea.Cmd {
	l, at, ok := m.route.Target()
	r, isRouter := m.src.(view.Router)
	if !ok || m.screen != routingScreen || !isRouter {
		return nil
	}
	k := routeKey{l.Layer, at}
	rs := &m.routes
	if k == rs.want && (rs.loading || rs.err != nil || rs.cache[k] != nil) {
		return nil
	}
	rs.want, rs.err = k, nil
	if rs.cache[k] != nil {
		return nil
	}
	rs.loading = true
	ctx := m.ctx
	return m.track(func() tea.Msg {
		res, err := r.Route(ctx, k.layer, k.at)
		return routeMsg{key: k, res: res, err: err}
	})
}

func (m *Model) routeLoaded(msg routeMsg) tea.Cmd {
	rs := &m.routes
	if msg.err == nil {
		if rs.cache == nil || len(rs.cache) > 256 {
			rs.cache = map[routeKey]*view.TokenRoute{}
		}
		rs.cache[msg.key] = msg.res
	}
	if msg.key != rs.want {
		return m.ensureRoute() // stale: the cursor moved on
	}
	rs.loading, rs.err = false, msg.err
	return nil
}

// routingView draws the routing screen: the summary and legend, the grid, the token's detail.
func (m *Model) routingView(l screenLayout) string {
	r := m.rep.Routing
	head := m.st.Text.Render(" "+r.Summary) + "   " + routing.Legend(m.st)
	grid := m.st.Panel("routing · MoE layers × tokens", m.route.View(), l.gridPanel.w, l.gridPanel.h, true)
	var tr *view.TokenRoute
	rs := &m.routes
	if rs.err == nil {
		tr = rs.cache[rs.want]
	}
	title := "token"
	if lay, at, ok := m.route.Target(); ok {
		title = fmt.Sprintf("%s · step %d seq %d pos %d", lay.Op, at.Step, at.Seq, at.Pos)
	}
	detail := m.st.Panel(title, routing.Detail(m.st, tr, rs.err, rs.loading, [2]string{m.rep.A.Side, m.rep.B.Side},
		l.detailPanel.w-2, l.detailPanel.h-2), l.detailPanel.w, l.detailPanel.h, false)
	return head + "\n" + grid + "\n" + detail
}
