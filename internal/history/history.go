// Package history is hostqos's history store: an embedded SQLite database
// (pure Go, no cgo) under the daemon's state directory that keeps, per link,
// class, rule and app, the bytes, packets and drops of each direction, and
// a record of every flow that ended, and the engine's events.
//
// The engine hands it one Sample a second (Record); a writer goroutine
// turns the cumulative counters into per-second amounts and writes them,
// with their per-minute and per-hour roll-ups, in one transaction per
// batch, off the engine's lock: Record never waits for the disk (a full
// queue drops the sample, and the next one carries its amounts). The
// database runs in WAL mode, so a crash (kill -9) loses at most the
// samples of the last batch and never corrupts it.
//
// Resolutions and retention: per second for Options.Raw (1 h), per minute
// for Options.Minutes (30 days), per hour for Options.Hours (a year); flow
// records for Options.Flows (30 days) and at most Options.MaxFlows of them;
// events as long, at most Options.MaxEvents and Options.MaxEventBytes. The
// whole database keeps within Options.MaxBytes and leaves Options.MinFree
// of its file system free (budget.go).
package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/hostqos/hostqos/internal/policy"
)

// Kinds of series.
const (
	KindLinks   = "links"
	KindClasses = "classes"
	KindRules   = "rules"
	KindApps    = "apps"
)

// Kinds lists the series kinds in display order.
var Kinds = []string{KindLinks, KindClasses, KindRules, KindApps}

// Counters are bytes, packets and drops of each direction: In is what the
// host received, Out what it sent.
type Counters struct {
	BytesIn, BytesOut     uint64
	PacketsIn, PacketsOut uint64
	DropsIn, DropsOut     uint64
}

func (c Counters) fields() [6]uint64 {
	return [6]uint64{c.BytesIn, c.BytesOut, c.PacketsIn, c.PacketsOut, c.DropsIn, c.DropsOut}
}

func countersOf(f [6]uint64) Counters {
	return Counters{f[0], f[1], f[2], f[3], f[4], f[5]}
}

// Add adds d to c.
func (c *Counters) Add(d Counters) {
	c.BytesIn += d.BytesIn
	c.BytesOut += d.BytesOut
	c.PacketsIn += d.PacketsIn
	c.PacketsOut += d.PacketsOut
	c.DropsIn += d.DropsIn
	c.DropsOut += d.DropsOut
}

// Delta is what c added since prev. A counter that went backwards was
// reset (a class rebuilt, an interface recreated, the daemon restarted for
// app counters): all of its present value is new.
func (c Counters) Delta(prev Counters) Counters {
	a, b := c.fields(), prev.fields()
	for i := range a {
		if a[i] < b[i] {
			return c
		}
	}
	var d [6]uint64
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return countersOf(d)
}

func (c Counters) zero() bool { return c == Counters{} }

// Series is one object's cumulative counters at a sample.
type Series struct {
	Kind string
	Name string
	// Owner is the uid of the only ordinary user who may see the series
	// (an app's user, the user of a run's rule); -1: everyone.
	Owner int64
	// Image is the image of an app that is a container (its Name is
	// ContainerApp's), kept with the series: the latest one seen.
	Image string
	Counters
}

// containerPrefix starts the name of an app that is a container. No
// executable's name (an absolute path) or command name (at most 15
// bytes; the prefix and the shortest runtime/name are 17) can be one.
const containerPrefix = "container:"

// ContainerApp is the name of the app that is a container
// (docs/containers.md): container:RUNTIME/NAME, one series whichever of
// its processes sent.
func ContainerApp(runtime, name string) string {
	return containerPrefix + runtime + "/" + name
}

// ParseContainerApp splits the name of an app that is a container into
// its runtime and name; ok is false for any other app.
func ParseContainerApp(app string) (runtime, name string, ok bool) {
	rest, ok := strings.CutPrefix(app, containerPrefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}

// Flow is the record of a flow that ended: the datapath saw no packet of it
// for the engine's idle timeout, or evicted it from its table.
type Flow struct {
	Proto  string
	Local  string
	Remote string
	// FirstNS is the datapath's time of the flow's first packet
	// (CLOCK_MONOTONIC): with the 5-tuple it names the flow, so a flow
	// that is recorded again (it resumed after an idle period, or a
	// restarted daemon saw it again) updates its one record.
	FirstNS uint64
	PID     uint32
	Comm    string
	Exe     string
	UID     uint32
	Cgroup  string
	Unit    string
	Rule    string
	Class   string
	// Container is the flow's container as an app (ContainerApp; "" for
	// the host's own), Image its image.
	Container string
	Image     string
	Start     time.Time
	End       time.Time
	Counters
}

// Event is something that happened (a quota reached, a schedule switch, a
// new app seen, a link up or down), as the engine's event stream carries
// it.
type Event struct {
	Time    time.Time
	Kind    string
	Subject string // what it is about: a rule, an app, a link
	Message string
	Fields  map[string]any // the event's figures (stored as JSON)
	// Owner is the uid of the only ordinary user who may see it; -1:
	// everyone.
	Owner int64
}

// Sample is what the engine read at one tick.
type Sample struct {
	Time   time.Time
	Series []Series
	Flows  []Flow // flows that ended since the last sample
	// Unchanged are kinds whose series the sample leaves out because
	// none of them changed since the previous sample (an idle daemon
	// with 10,000 rules does not hand over 10,000 equal readings a
	// second); their next readings' amounts cover the time since.
	Unchanged []string
}

// Options are the store's retention and sizes; zero fields take the
// defaults.
type Options struct {
	Raw      time.Duration // per-second samples (config history_raw)
	Minutes  time.Duration // per-minute roll-ups (history_minutes)
	Hours    time.Duration // per-hour roll-ups (history_hours)
	Flows    time.Duration // flow records and events (history_flows)
	MaxFlows int           // flow records at most (history_max_flows)
	// Events at most (history_max_events), and their bytes
	// (history_max_event_bytes).
	MaxEvents     int
	MaxEventBytes int64
	// MaxBytes is the database's budget (history_max_bytes); MinFree the
	// space history leaves free on its file system (history_min_free).
	MaxBytes int64
	MinFree  int64
	Logger   *slog.Logger
}

// Check validates the options (after defaults) and names the bad one by
// its config key.
func (o *Options) Check() error {
	o.defaults()
	for _, c := range []struct {
		key string
		v   time.Duration
	}{{"history_raw", o.Raw}, {"history_minutes", o.Minutes}, {"history_hours", o.Hours}, {"history_flows", o.Flows}} {
		lim := policy.SpanLimits[c.key]
		if c.v < lim[0] || c.v > lim[1] {
			return fmt.Errorf("history: %s = %s: want %s … %s", c.key, policy.FormatSpan(c.v), policy.FormatSpan(lim[0]), policy.FormatSpan(lim[1]))
		}
	}
	if o.MaxFlows < policy.MinHistoryMaxFlows || o.MaxFlows > policy.MaxHistoryMaxFlows {
		return fmt.Errorf("history: history_max_flows = %d: want %d … %d", o.MaxFlows, policy.MinHistoryMaxFlows, policy.MaxHistoryMaxFlows)
	}
	if o.MaxEvents < policy.MinHistoryMaxEvents || o.MaxEvents > policy.MaxHistoryMaxEvents {
		return fmt.Errorf("history: history_max_events = %d: want %d … %d", o.MaxEvents, policy.MinHistoryMaxEvents, policy.MaxHistoryMaxEvents)
	}
	for _, c := range []struct {
		key string
		v   int64
	}{{"history_max_event_bytes", o.MaxEventBytes}, {"history_max_bytes", o.MaxBytes}, {"history_min_free", o.MinFree}} {
		lim := policy.SizeLimits[c.key]
		if c.v < lim[0] || c.v > lim[1] {
			return fmt.Errorf("history: %s = %d bytes: want %s … %s", c.key, c.v, policy.Size(lim[0]), policy.Size(lim[1]))
		}
	}
	return nil
}

func (o *Options) defaults() {
	var none policy.Settings
	for _, f := range []struct {
		key string
		v   *time.Duration
	}{{"history_raw", &o.Raw}, {"history_minutes", &o.Minutes}, {"history_hours", &o.Hours}, {"history_flows", &o.Flows}} {
		if *f.v == 0 {
			*f.v = none.Span(f.key)
		}
	}
	if o.MaxFlows == 0 {
		o.MaxFlows = none.MaxFlowRecords()
	}
	if o.MaxEvents == 0 {
		o.MaxEvents = none.MaxEventRecords()
	}
	for _, f := range []struct {
		key string
		v   *int64
	}{{"history_max_event_bytes", &o.MaxEventBytes}, {"history_max_bytes", &o.MaxBytes}, {"history_min_free", &o.MinFree}} {
		if *f.v == 0 {
			*f.v = none.Bytes(f.key)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// queueLen is how many samples and events may wait for the writer: a
// minute of samples, if the disk stalls.
const queueLen = 64

// item is one unit of the writer's work.
type item struct {
	sample *Sample
	event  *Event
	fields string // the event's fields as stored
	flush  chan struct{}
}

// Store is an open history database.
type Store struct {
	db   *sql.DB
	path string
	opt  Options
	log  *slog.Logger

	ch      chan item
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once

	// Writer state (the writer goroutine only).
	ids    map[seriesKey]int64
	images map[int64]string // a container app's image, as stored
	last   map[int64]Counters
	// lastT is the time (Unix seconds) of each series' last reading this
	// run: a sample that comes more than a second after it (a sample the
	// full queue dropped) spreads its amounts over the seconds it covers
	// when it updates a roll-up's busiest second.
	lastT map[int64]int64
	// unchangedT is, by kind, the time of the last sample that left the
	// kind's series out as unchanged (Sample.Unchanged): each of them was
	// read then as it was before.
	unchangedT map[string]int64
	// The events table's rows and bytes (budget.go).
	events, eventBytes int64
	lastWarn           time.Time

	dropped   atomic.Uint64 // samples and events the full queue refused
	refused   atomic.Uint64 // samples and events not recorded for want of room
	writeErrs atomic.Uint64
	written   atomic.Uint64

	mu        sync.Mutex
	recording bool   // false: out of room (budget.go)
	whyNot    string // why not recording
	// The writer's events and eventBytes as Stats reads them.
	evRows, evBytes int64
}

type seriesKey struct {
	kind, name string
	owner      int64
}

// Open opens (creating it if needed) the database at path and starts its
// writer. The file is readable by its owner only.
func Open(path string, o Options) (*Store, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	// Create the file with mode 0600 before SQLite does (it would use the
	// umask's mode); the WAL files take the database's mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open history database %s: %w", path, err)
	}
	f.Close()
	// journal_size_limit: the WAL is cut back to 4 MiB after a checkpoint
	// (it counts against the budget).
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)&_pragma=foreign_keys(0)&_pragma=journal_size_limit(4194304)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open history database %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	s := &Store{
		db: db, path: path, opt: o, log: o.Logger,
		ch: make(chan item, queueLen), done: make(chan struct{}), stopped: make(chan struct{}),
		ids: map[seriesKey]int64{}, images: map[int64]string{}, last: map[int64]Counters{}, lastT: map[int64]int64{}, unchangedT: map[string]int64{}, recording: true,
	}
	if err := s.init(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open history database %s: %w", path, err)
	}
	go s.writer()
	return s, nil
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Options are the store's options after defaults.
func (s *Store) Options() Options { return s.opt }

const schema = `
CREATE TABLE IF NOT EXISTS series (
	id    INTEGER PRIMARY KEY,
	kind  TEXT NOT NULL,
	name  TEXT NOT NULL,
	owner INTEGER NOT NULL,
	image TEXT NOT NULL DEFAULT '',
	UNIQUE (kind, name, owner)
);
CREATE TABLE IF NOT EXISTS last (
	series INTEGER PRIMARY KEY,
	bi INTEGER NOT NULL, bo INTEGER NOT NULL, pi INTEGER NOT NULL,
	po INTEGER NOT NULL, di INTEGER NOT NULL, do INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS s1 (
	series INTEGER NOT NULL, t INTEGER NOT NULL,
	bi INTEGER NOT NULL, bo INTEGER NOT NULL, pi INTEGER NOT NULL,
	po INTEGER NOT NULL, di INTEGER NOT NULL, do INTEGER NOT NULL,
	PRIMARY KEY (series, t)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS m1 (
	series INTEGER NOT NULL, t INTEGER NOT NULL,
	bi INTEGER NOT NULL, bo INTEGER NOT NULL, pi INTEGER NOT NULL,
	po INTEGER NOT NULL, di INTEGER NOT NULL, do INTEGER NOT NULL,
	pbi INTEGER NOT NULL DEFAULT 0, pbo INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (series, t)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS h1 (
	series INTEGER NOT NULL, t INTEGER NOT NULL,
	bi INTEGER NOT NULL, bo INTEGER NOT NULL, pi INTEGER NOT NULL,
	po INTEGER NOT NULL, di INTEGER NOT NULL, do INTEGER NOT NULL,
	pbi INTEGER NOT NULL DEFAULT 0, pbo INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (series, t)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS s1_t ON s1 (t);
CREATE INDEX IF NOT EXISTS m1_t ON m1 (t);
CREATE INDEX IF NOT EXISTS h1_t ON h1 (t);
CREATE TABLE IF NOT EXISTS flows (
	id INTEGER PRIMARY KEY,
	proto TEXT NOT NULL, local TEXT NOT NULL, remote TEXT NOT NULL, first_ns INTEGER NOT NULL,
	pid INTEGER NOT NULL, comm TEXT NOT NULL, exe TEXT NOT NULL, uid INTEGER NOT NULL,
	cgroup TEXT NOT NULL, unit TEXT NOT NULL, rule TEXT NOT NULL, class TEXT NOT NULL,
	start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL,
	bi INTEGER NOT NULL, bo INTEGER NOT NULL, pi INTEGER NOT NULL,
	po INTEGER NOT NULL, di INTEGER NOT NULL, do INTEGER NOT NULL,
	container TEXT NOT NULL DEFAULT '', image TEXT NOT NULL DEFAULT '',
	UNIQUE (proto, local, remote, first_ns)
);
CREATE INDEX IF NOT EXISTS flows_end ON flows (end_ms);
CREATE TABLE IF NOT EXISTS events (
	id INTEGER PRIMARY KEY,
	t_ms INTEGER NOT NULL, kind TEXT NOT NULL, subject TEXT NOT NULL,
	message TEXT NOT NULL, owner INTEGER NOT NULL, fields TEXT NOT NULL DEFAULT '',
	bytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS events_t ON events (t_ms);
`

// init creates the tables and loads the series and their last readings.
func (s *Store) init() error {
	if _, err := s.db.Exec(schema); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	if err := s.migrateEvents(); err != nil {
		return err
	}
	if err := s.migratePeaks(); err != nil {
		return err
	}
	if err := s.migrateContainers(); err != nil {
		return err
	}
	if err := s.countEvents(); err != nil {
		return err
	}
	rows, err := s.db.Query(`SELECT s.id, s.kind, s.name, s.owner, s.image, l.bi, l.bo, l.pi, l.po, l.di, l.do
		FROM series s LEFT JOIN last l ON l.series = s.id`)
	if err != nil {
		return fmt.Errorf("read series: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var k seriesKey
		var image string
		var f [6]sql.NullInt64
		if err := rows.Scan(&id, &k.kind, &k.name, &k.owner, &image, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5]); err != nil {
			return fmt.Errorf("read series: %w", err)
		}
		s.ids[k] = id
		if image != "" {
			s.images[id] = image
		}
		if f[0].Valid {
			var c [6]uint64
			for i := range f {
				c[i] = uint64(f[i].Int64)
			}
			s.last[id] = countersOf(c)
		}
	}
	return rows.Err()
}

// Record queues a sample for writing; it never blocks. It reports false
// when the queue was full and the sample was dropped (the next sample's
// cumulative counters carry its amounts; its ended flows are lost).
func (s *Store) Record(sm Sample) bool {
	return s.enqueue(item{sample: &sm})
}

// RecordEvent queues an event for writing; it never blocks. It reports
// false when the queue was full and the event was dropped. Its text is
// clipped to bounded sizes (budget.go).
func (s *Store) RecordEvent(ev Event) bool {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	fields := clipEvent(&ev)
	return s.enqueue(item{event: &ev, fields: fields})
}

func (s *Store) enqueue(it item) bool {
	select {
	case <-s.done:
		return false
	default:
	}
	select {
	case s.ch <- it:
		return true
	default:
		s.dropped.Add(1)
		return false
	}
}

// Flush waits until everything queued before it is written (or ctx ends).
func (s *Store) Flush(ctx context.Context) error {
	c := make(chan struct{})
	select {
	case s.ch <- item{flush: c}:
	case <-s.stopped:
		return errors.New("flush history: store closed")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-c:
		return nil
	case <-s.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats are the store's own counters.
type Stats struct {
	Written     uint64 // samples and events written
	Dropped     uint64 // refused by a full queue
	Refused     uint64 // not recorded for want of room (budget.go)
	WriteErrors uint64 // batches that failed
	// Recording is false while history is out of room; WhyNot says why.
	Recording bool
	WhyNot    string
	// Events and EventBytes are the events table's rows and bytes.
	Events, EventBytes int64
}

// Stats reads the store's own counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Written: s.written.Load(), Dropped: s.dropped.Load(), Refused: s.refused.Load(), WriteErrors: s.writeErrs.Load(),
		Recording: s.recording, WhyNot: s.whyNot, Events: s.evRows, EventBytes: s.evBytes}
}

// Close writes what is queued, stops the writer and closes the database.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.done) })
	<-s.stopped
	return s.db.Close()
}

// pruneEvery is how often the writer deletes what is past its retention.
const pruneEvery = time.Minute

// writer writes queued items, a batch per transaction, until Close.
func (s *Store) writer() {
	defer close(s.stopped)
	prune := time.NewTicker(pruneEvery)
	defer prune.Stop()
	s.pruneNow(time.Now())
	for {
		var batch []item
		select {
		case it := <-s.ch:
			batch = append(batch, it)
		case <-prune.C:
			s.pruneNow(time.Now())
			continue
		case <-s.done:
			for {
				select {
				case it := <-s.ch:
					batch = append(batch, it)
					continue
				default:
				}
				break
			}
			s.write(batch)
			return
		}
	drain:
		for len(batch) < queueLen {
			select {
			case it := <-s.ch:
				batch = append(batch, it)
			default:
				break drain
			}
		}
		s.write(batch)
	}
}

// write writes a batch in one transaction, when there is room for it
// (budget.go), and then answers its flushes.
func (s *Store) write(batch []item) {
	n := 0
	for _, it := range batch {
		if it.flush == nil {
			n++
		}
	}
	if n > 0 {
		ok, why := s.room()
		if ok {
			rows, bytes, err := s.writeTx(batch)
			switch {
			case err != nil:
				s.writeErrs.Add(1)
				s.warnLimited("write history", err)
				if diskFull(err) {
					ok, why = false, "the disk is full: "+err.Error()
				}
				s.refused.Add(uint64(n))
			default:
				s.written.Add(uint64(n))
				s.events += rows
				s.eventBytes += bytes
				s.capEvents()
			}
		} else {
			s.refused.Add(uint64(n))
		}
		s.setRecording(ok, why)
		s.publishCounts()
	}
	for _, it := range batch {
		if it.flush != nil {
			close(it.flush)
		}
	}
}

// upsertSQL adds a row's amounts to a table: the per-second one (s1), or
// a roll-up (m1, h1), which also keeps the bytes of its busiest second
// each way (pbi, pbo), so that a coarse point still knows its peak.
func upsertSQL(table string) string {
	if table == "s1" {
		return `INSERT INTO s1 (series, t, bi, bo, pi, po, di, do) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (series, t) DO UPDATE SET bi = bi + excluded.bi, bo = bo + excluded.bo,
		pi = pi + excluded.pi, po = po + excluded.po, di = di + excluded.di, do = do + excluded.do`
	}
	return `INSERT INTO ` + table + ` (series, t, bi, bo, pi, po, di, do, pbi, pbo) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (series, t) DO UPDATE SET bi = bi + excluded.bi, bo = bo + excluded.bo,
		pi = pi + excluded.pi, po = po + excluded.po, di = di + excluded.di, do = do + excluded.do,
		pbi = max(pbi, excluded.pbi), pbo = max(pbo, excluded.pbo)`
}

// migratePeaks adds the busiest-second columns to the roll-up tables of
// an older store; their old rows keep 0 (no peak known), which queries
// read as the row's mean.
func (s *Store) migratePeaks() error {
	for _, table := range []string{"m1", "h1"} {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM pragma_table_info('` + table + `') WHERE name = 'pbi'`).Scan(&n); err != nil {
			return fmt.Errorf("read %s table: %w", table, err)
		}
		if n > 0 {
			continue
		}
		for _, col := range []string{"pbi", "pbo"} {
			if _, err := s.db.Exec(`ALTER TABLE ` + table + ` ADD COLUMN ` + col + ` INTEGER NOT NULL DEFAULT 0`); err != nil {
				return fmt.Errorf("add %s to %s table: %w", col, table, err)
			}
		}
	}
	return nil
}

// migrateContainers adds the columns that name containers (a container
// app's image; a flow record's container and image) to the tables of an
// older store; its old rows are the host's own.
func (s *Store) migrateContainers() error {
	for _, c := range []struct{ table, col string }{{"series", "image"}, {"flows", "container"}, {"flows", "image"}} {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM pragma_table_info('`+c.table+`') WHERE name = ?`, c.col).Scan(&n); err != nil {
			return fmt.Errorf("read %s table: %w", c.table, err)
		}
		if n > 0 {
			continue
		}
		if _, err := s.db.Exec(`ALTER TABLE ` + c.table + ` ADD COLUMN ` + c.col + ` TEXT NOT NULL DEFAULT ''`); err != nil {
			return fmt.Errorf("add %s to %s table: %w", c.col, c.table, err)
		}
	}
	return nil
}

// writeTx writes a batch; it returns the rows and bytes of events added.
func (s *Store) writeTx(batch []item) (evRows, evBytes int64, err error) {
	tx, err := s.db.Begin()
	if err != nil {
		return 0, 0, fmt.Errorf("begin: %w", err)
	}
	// The in-memory state changes only with a committed transaction.
	newIDs := map[seriesKey]int64{}
	newLast := map[int64]Counters{}
	newLastT := map[int64]int64{}
	newUnchangedT := map[string]int64{}
	newImages := map[int64]string{}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
			return
		}
		maps(newIDs, s.ids)
		maps(newImages, s.images)
		maps(newLast, s.last)
		maps(newLastT, s.lastT)
		maps(newUnchangedT, s.unchangedT)
	}()
	var st [3]*sql.Stmt
	for i, table := range []string{"s1", "m1", "h1"} {
		if st[i], err = tx.Prepare(upsertSQL(table)); err != nil {
			return 0, 0, fmt.Errorf("prepare: %w", err)
		}
		defer st[i].Close()
	}
	lastSt, err := tx.Prepare(`INSERT INTO last (series, bi, bo, pi, po, di, do) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (series) DO UPDATE SET bi = excluded.bi, bo = excluded.bo, pi = excluded.pi,
		po = excluded.po, di = excluded.di, do = excluded.do`)
	if err != nil {
		return 0, 0, fmt.Errorf("prepare: %w", err)
	}
	defer lastSt.Close()
	flowSt, err := tx.Prepare(`INSERT INTO flows (proto, local, remote, first_ns, pid, comm, exe, uid, cgroup, unit,
		rule, class, start_ms, end_ms, bi, bo, pi, po, di, do, container, image)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (proto, local, remote, first_ns) DO UPDATE SET end_ms = excluded.end_ms,
		bi = excluded.bi, bo = excluded.bo, pi = excluded.pi, po = excluded.po, di = excluded.di, do = excluded.do`)
	if err != nil {
		return 0, 0, fmt.Errorf("prepare: %w", err)
	}
	defer flowSt.Close()
	id := func(k seriesKey) (int64, error) {
		if v, ok := newIDs[k]; ok {
			return v, nil
		}
		if v, ok := s.ids[k]; ok {
			return v, nil
		}
		var v int64
		err := tx.QueryRow(`INSERT INTO series (kind, name, owner) VALUES (?, ?, ?) RETURNING id`, k.kind, k.name, k.owner).Scan(&v)
		if err != nil {
			return 0, fmt.Errorf("add series %s %q: %w", k.kind, k.name, err)
		}
		newIDs[k] = v
		return v, nil
	}
	// image keeps a container app's latest image with its series.
	image := func(sid int64, img string) error {
		old, ok := newImages[sid]
		if !ok {
			old = s.images[sid]
		}
		if img == "" || img == old {
			return nil
		}
		if _, err := tx.Exec(`UPDATE series SET image = ? WHERE id = ?`, img, sid); err != nil {
			return fmt.Errorf("write series image: %w", err)
		}
		newImages[sid] = img
		return nil
	}
	for _, it := range batch {
		switch {
		case it.sample != nil:
			t := it.sample.Time.Unix()
			for _, k := range it.sample.Unchanged {
				newUnchangedT[k] = t
			}
			for _, se := range it.sample.Series {
				sid, err := id(seriesKey{se.Kind, se.Name, se.Owner})
				if err != nil {
					return 0, 0, err
				}
				if err := image(sid, se.Image); err != nil {
					return 0, 0, err
				}
				prev, seen := newLast[sid]
				if !seen {
					prev, seen = s.last[sid]
				}
				var d Counters
				switch {
				case seen:
					d = se.Counters.Delta(prev)
				case se.Kind == KindRules || se.Kind == KindApps:
					// The engine counts rules and apps from zero.
					d = se.Counters
				}
				newLast[sid] = se.Counters
				secs := int64(1) // the seconds this reading's amounts cover
				lt, ok := newLastT[sid]
				if !ok {
					lt, ok = s.lastT[sid]
				}
				if ok {
					ut, uok := newUnchangedT[se.Kind]
					if !uok {
						ut = s.unchangedT[se.Kind]
					}
					secs = max(1, t-max(lt, ut))
				}
				newLastT[sid] = t
				f := se.Counters.fields()
				if !seen || f != prev.fields() {
					if _, err := lastSt.Exec(sid, i64(f[0]), i64(f[1]), i64(f[2]), i64(f[3]), i64(f[4]), i64(f[5])); err != nil {
						return 0, 0, fmt.Errorf("write last reading: %w", err)
					}
				}
				if d.zero() {
					continue
				}
				df := d.fields()
				row := []any{sid, nil, i64(df[0]), i64(df[1]), i64(df[2]), i64(df[3]), i64(df[4]), i64(df[5])}
				for i, step := range []int64{1, 60, 3600} {
					row[1] = t - t%step
					args := row
					if i > 0 { // a roll-up: and the bytes of this reading's seconds, each
						args = append(row[:len(row):len(row)], i64(df[0])/secs, i64(df[1])/secs)
					}
					if _, err := st[i].Exec(args...); err != nil {
						return 0, 0, fmt.Errorf("write sample: %w", err)
					}
				}
			}
			for _, fl := range it.sample.Flows {
				f := fl.Counters.fields()
				if _, err := flowSt.Exec(fl.Proto, fl.Local, fl.Remote, i64(fl.FirstNS), fl.PID, fl.Comm, fl.Exe, fl.UID,
					fl.Cgroup, fl.Unit, fl.Rule, fl.Class, fl.Start.UnixMilli(), fl.End.UnixMilli(),
					i64(f[0]), i64(f[1]), i64(f[2]), i64(f[3]), i64(f[4]), i64(f[5]), fl.Container, fl.Image); err != nil {
					return 0, 0, fmt.Errorf("write flow record: %w", err)
				}
			}
		case it.event != nil:
			ev := it.event
			b := eventBytes(ev, it.fields)
			if _, err := tx.Exec(`INSERT INTO events (t_ms, kind, subject, message, owner, fields, bytes) VALUES (?, ?, ?, ?, ?, ?, ?)`,
				ev.Time.UnixMilli(), ev.Kind, ev.Subject, ev.Message, ev.Owner, it.fields, b); err != nil {
				return 0, 0, fmt.Errorf("write event: %w", err)
			}
			evRows++
			evBytes += b
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, fmt.Errorf("commit: %w", err)
	}
	return evRows, evBytes, nil
}

func maps[K comparable, V any](from, to map[K]V) {
	for k, v := range from {
		to[k] = v
	}
}

// i64 stores a counter in SQLite's signed 64-bit integer (counters never
// reach 2^63).
func i64(v uint64) int64 { return int64(v) }

// pruneNow deletes what is past its retention, and the oldest flow records
// beyond MaxFlows (events are held to their caps at every write).
func (s *Store) pruneNow(now time.Time) {
	n := now.Unix()
	stmts := []struct {
		q    string
		args []any
	}{
		{`DELETE FROM s1 WHERE t < ?`, []any{n - int64(s.opt.Raw/time.Second)}},
		{`DELETE FROM m1 WHERE t < ?`, []any{n - int64(s.opt.Minutes/time.Second)}},
		{`DELETE FROM h1 WHERE t < ?`, []any{n - int64(s.opt.Hours/time.Second)}},
		{`DELETE FROM flows WHERE end_ms < ?`, []any{now.Add(-s.opt.Flows).UnixMilli()}},
		{`DELETE FROM events WHERE t_ms < ?`, []any{now.Add(-s.opt.Flows).UnixMilli()}},
	}
	for _, st := range stmts {
		if _, err := s.db.Exec(st.q, st.args...); err != nil {
			s.warnLimited("prune history", err)
			return
		}
	}
	err := s.trimOldest("flows", s.opt.MaxFlows)
	if err == nil {
		err = s.countEvents()
	}
	if err != nil {
		s.warnLimited("prune history", err)
	}
	s.publishCounts()
}

// publishCounts makes the writer's event counts what Stats reads.
func (s *Store) publishCounts() {
	s.mu.Lock()
	s.evRows, s.evBytes = s.events, s.eventBytes
	s.mu.Unlock()
}

// IntegrityCheck runs SQLite's integrity check and returns its verdict
// ("ok" when the database is sound).
func (s *Store) IntegrityCheck(ctx context.Context) (string, error) {
	var v string
	if err := s.db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&v); err != nil {
		return "", fmt.Errorf("check history database: %w", err)
	}
	return v, nil
}

// DatabaseSize is the logical size of the database at path (page_count ×
// page_size, the WAL's committed pages included), read through a separate
// read-only connection while a daemon may be writing it.
func DatabaseSize(ctx context.Context, path string) (int64, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return 0, fmt.Errorf("size of history database %s: %w", path, err)
	}
	defer db.Close()
	var pages, size int64
	if err := db.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		return 0, fmt.Errorf("size of history database %s: %w", path, err)
	}
	if err := db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&size); err != nil {
		return 0, fmt.Errorf("size of history database %s: %w", path, err)
	}
	return pages * size, nil
}
