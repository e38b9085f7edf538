// Command goclients runs the Go RocketMQ client (github.com/apache/rocketmq-client-go/v2, remoting
// protocol) against one broker, scenario after scenario in one process, and prints one JSON line per
// scenario: {"scenario": name, "ok": bool, "error": text, ...what it observed}. It reports what it
// saw (messages with their keys, tags and properties, send results, orders); the caller
// (tests/remoting/test_go_client.py) decides whether that is right.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

type settings struct {
	nameserver string
	broker     string
	run        string
	timeout    time.Duration
	only       map[string]bool
}

var cfg settings

var resumeGapMs int

// seen is one received message as reported: what the test compares with what was sent.
type seen struct {
	Body       string            `json:"body"`
	Topic      string            `json:"topic"`
	Tags       string            `json:"tags"`
	Keys       string            `json:"keys"`
	Properties map[string]string `json:"properties"`
	QueueID    int               `json:"queue_id"`
	QueueOffs  int64             `json:"queue_offset"`
	MsgID      string            `json:"msg_id"`
	BornMs     int64             `json:"born_ms"`
	Reconsumed int32             `json:"reconsume_times"`
	ReceivedMs int64             `json:"received_ms"`
}

// userProps are the properties a scenario set itself (RocketMQ's own are upper case or start with __).
func userProps(m *primitive.MessageExt) map[string]string {
	out := map[string]string{}
	for k, v := range m.GetProperties() {
		if strings.HasPrefix(k, "u-") {
			out[k] = v
		}
	}
	return out
}

func view(m *primitive.MessageExt) seen {
	return seen{
		Body: string(m.Body), Topic: m.Topic, Tags: m.GetTags(), Keys: m.GetKeys(),
		Properties: userProps(m), QueueID: m.Queue.QueueId, QueueOffs: m.QueueOffset,
		MsgID: m.MsgId, BornMs: m.BornTimestamp, ReceivedMs: time.Now().UnixMilli(),
		Reconsumed: m.ReconsumeTimes,
	}
}

var emitting sync.Mutex

func emit(name string, fields map[string]any, err error) {
	emitting.Lock()
	defer emitting.Unlock()
	out := map[string]any{"scenario": name, "ok": err == nil, "error": ""}
	for k, v := range fields {
		out[k] = v
	}
	if err != nil {
		out["error"] = err.Error()
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}

func nameserver() primitive.NamesrvAddr { return primitive.NamesrvAddr{cfg.nameserver} }

func topic(name string) string { return "go-" + name + "-" + cfg.run }

func group(name string) string { return "go-" + name + "-" + cfg.run }

func newProducer(name string, opts ...producer.Option) (rocketmq.Producer, error) {
	all := append([]producer.Option{
		producer.WithNameServer(nameserver()),
		producer.WithGroupName(group(name)),
		producer.WithInstanceName(group(name)),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(5 * time.Second),
	}, opts...)
	p, err := rocketmq.NewProducer(all...)
	if err != nil {
		return nil, err
	}
	return p, p.Start()
}

// collector gathers the messages a push consumer delivers, and says when enough came.
type collector struct {
	mu     sync.Mutex
	got    []seen
	want   int
	enough chan struct{}
	once   sync.Once
}

func newCollector(want int) *collector {
	return &collector{want: want, enough: make(chan struct{})}
}

func (c *collector) add(ms ...*primitive.MessageExt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range ms {
		c.got = append(c.got, view(m))
	}
	if len(c.got) >= c.want {
		c.once.Do(func() { close(c.enough) })
	}
}

func (c *collector) messages() []seen {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]seen(nil), c.got...)
}

// wait until want messages came (then linger a little for duplicates) or the timeout ends.
func (c *collector) wait(linger time.Duration) error {
	select {
	case <-c.enough:
		time.Sleep(linger)
		return nil
	case <-time.After(cfg.timeout):
		return fmt.Errorf("%d of %d messages within %s", len(c.messages()), c.want, cfg.timeout)
	}
}

type pushOptions struct {
	selector consumer.MessageSelector
	orderly  bool
	from     consumer.ConsumeFromWhere
}

func startPush(name, instance, t string, o pushOptions, c *collector) (rocketmq.PushConsumer, error) {
	opts := []consumer.Option{
		consumer.WithNameServer(nameserver()),
		consumer.WithGroupName(group(name)),
		consumer.WithInstance(instance),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(o.from),
	}
	if o.orderly {
		opts = append(opts, consumer.WithConsumerOrder(true))
	}
	pc, err := rocketmq.NewPushConsumer(opts...)
	if err != nil {
		return nil, err
	}
	if o.selector.Expression == "" {
		o.selector = consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}
	}
	err = pc.Subscribe(t, o.selector, func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		c.add(ms...)
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return nil, err
	}
	return pc, pc.Start()
}

// readBack consumes a topic from its first offset with a fresh group until want messages came.
func readBack(name, t string, want int) ([]seen, error) {
	c := newCollector(want)
	pc, err := startPush(name+"-reader", group(name+"-reader"), t, pushOptions{from: consumer.ConsumeFromFirstOffset}, c)
	if err != nil {
		return nil, fmt.Errorf("push consumer: %w", err)
	}
	defer pc.Shutdown()
	err = c.wait(300 * time.Millisecond)
	return c.messages(), err
}

type sendView struct {
	Status  int    `json:"status"`
	MsgID   string `json:"msg_id"`
	OffsID  string `json:"offset_msg_id"`
	QueueID int    `json:"queue_id"`
	Offset  int64  `json:"queue_offset"`
	Broker  string `json:"broker"`
}

func sent(r *primitive.SendResult) sendView {
	v := sendView{Status: int(r.Status), MsgID: r.MsgID, OffsID: r.OffsetMsgID, Offset: r.QueueOffset}
	if r.MessageQueue != nil {
		v.QueueID = r.MessageQueue.QueueId
		v.Broker = r.MessageQueue.BrokerName
	}
	return v
}

func message(t string, i int, tag string) *primitive.Message {
	m := primitive.NewMessage(t, []byte(fmt.Sprintf("%s body %d", t, i)))
	m.WithTag(tag)
	m.WithKeys([]string{fmt.Sprintf("key-%d", i), fmt.Sprintf("other-%d", i)})
	m.WithProperty("u-index", strconv.Itoa(i))
	m.WithProperty("num", strconv.Itoa(i))
	m.WithProperty("u-text", fmt.Sprintf("héllo, wörld %d", i))
	return m
}

// ---------------------------------------------------------------- scenarios

func scenarioAdmin() (map[string]any, error) {
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(nameserver())))
	if err != nil {
		return nil, err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	t := topic("admin")
	err = a.CreateTopic(ctx, admin.WithTopicCreate(t), admin.WithBrokerAddrCreate(cfg.broker),
		admin.WithReadQueueNums(3), admin.WithWriteQueueNums(3))
	if err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}
	list, err := a.FetchAllTopicList(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetch topic list: %w", err)
	}
	queues, err := a.FetchPublishMessageQueues(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("fetch publish queues: %w", err)
	}
	ids := []int{}
	for _, q := range queues {
		ids = append(ids, q.QueueId)
	}
	sort.Ints(ids)
	return map[string]any{"topic": t, "topics": list.TopicList, "queue_ids": ids}, nil
}

func scenarioSync() (map[string]any, error) {
	t := topic("sync")
	p, err := newProducer("sync-producer")
	if err != nil {
		return nil, err
	}
	defer p.Shutdown()
	results := []sendView{}
	for i := 0; i < 4; i++ {
		r, err := p.SendSync(context.Background(), message(t, i, "TagA"))
		if err != nil {
			return map[string]any{"sent": results}, fmt.Errorf("send %d: %w", i, err)
		}
		results = append(results, sent(r))
	}
	got, err := readBack("sync", t, 4)
	return map[string]any{"topic": t, "sent": results, "received": got}, err
}

func scenarioAsync() (map[string]any, error) {
	t := topic("async")
	p, err := newProducer("async-producer")
	if err != nil {
		return nil, err
	}
	defer p.Shutdown()
	const n = 5
	var mu sync.Mutex
	results := []sendView{}
	errs := []string{}
	var done sync.WaitGroup
	for i := 0; i < n; i++ {
		done.Add(1)
		err := p.SendAsync(context.Background(), func(ctx context.Context, r *primitive.SendResult, err error) {
			defer done.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err.Error())
				return
			}
			results = append(results, sent(r))
		}, message(t, i, "TagAsync"))
		if err != nil {
			done.Done()
			return nil, fmt.Errorf("send async %d: %w", i, err)
		}
	}
	done.Wait()
	if len(errs) > 0 {
		return map[string]any{"sent": results}, errors.New(strings.Join(errs, "; "))
	}
	got, err := readBack("async", t, n)
	return map[string]any{"topic": t, "sent": results, "received": got}, err
}

func scenarioOneway() (map[string]any, error) {
	t := topic("oneway")
	p, err := newProducer("oneway-producer")
	if err != nil {
		return nil, err
	}
	defer p.Shutdown()
	const n = 3
	for i := 0; i < n; i++ {
		if err := p.SendOneWay(context.Background(), message(t, i, "TagOneway")); err != nil {
			return nil, fmt.Errorf("send oneway %d: %w", i, err)
		}
	}
	got, err := readBack("oneway", t, n)
	return map[string]any{"topic": t, "received": got}, err
}

func scenarioBatch() (map[string]any, error) {
	t := topic("batch")
	p, err := newProducer("batch-producer")
	if err != nil {
		return nil, err
	}
	defer p.Shutdown()
	const n = 5
	batch := []*primitive.Message{}
	for i := 0; i < n; i++ {
		batch = append(batch, message(t, i, "TagBatch"))
	}
	r, err := p.SendSync(context.Background(), batch...)
	if err != nil {
		return nil, fmt.Errorf("send batch: %w", err)
	}
	got, err := readBack("batch", t, n)
	return map[string]any{"topic": t, "sent": sent(r), "received": got}, err
}

func scenarioDelay() (map[string]any, error) {
	t := topic("delay")
	p, err := newProducer("delay-producer")
	if err != nil {
		return nil, err
	}
	defer p.Shutdown()
	c := newCollector(1)
	pc, err := startPush("delay-reader", group("delay-reader"), t, pushOptions{from: consumer.ConsumeFromFirstOffset}, c)
	if err != nil {
		return nil, err
	}
	defer pc.Shutdown()
	m := message(t, 0, "TagDelay")
	m.WithDelayTimeLevel(2) // RocketMQ's level 2: 5 s
	sentMs := time.Now().UnixMilli()
	r, err := p.SendSync(context.Background(), m)
	if err != nil {
		return nil, fmt.Errorf("send delayed: %w", err)
	}
	err = c.wait(0)
	return map[string]any{"topic": t, "sent": sent(r), "sent_ms": sentMs, "received": c.messages()}, err
}

func scenarioTagFilter() (map[string]any, error) {
	t := topic("tags")
	p, err := newProducer("tags-producer")
	if err != nil {
		return nil, err
	}
	defer p.Shutdown()
	tags := []string{"TagA", "TagB", "TagC", "TagA", "TagB", "TagC"}
	for i, tag := range tags {
		if _, err := p.SendSync(context.Background(), message(t, i, tag)); err != nil {
			return nil, fmt.Errorf("send %d: %w", i, err)
		}
	}
	c := newCollector(4)
	sel := consumer.MessageSelector{Type: consumer.TAG, Expression: "TagA || TagC"}
	pc, err := startPush("tags-consumer", group("tags-consumer"), t, pushOptions{selector: sel, from: consumer.ConsumeFromFirstOffset}, c)
	if err != nil {
		return nil, err
	}
	defer pc.Shutdown()
	err = c.wait(time.Second)
	return map[string]any{"topic": t, "received": c.messages()}, err
}

func scenarioPull() (map[string]any, error) {
	t := topic("pull")
	p, err := newProducer("pull-producer")
	if err != nil {
		return nil, err
	}
	defer p.Shutdown()
	const n = 6
	for i := 0; i < n; i++ {
		if _, err := p.SendSync(context.Background(), message(t, i, "TagPull")); err != nil {
			return nil, fmt.Errorf("send %d: %w", i, err)
		}
	}
	pc, err := rocketmq.NewPullConsumer(
		consumer.WithNameServer(nameserver()),
		consumer.WithGroupName(group("pull-consumer")),
		consumer.WithInstance(group("pull-consumer")),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		return nil, err
	}
	if err := pc.Subscribe(t, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}); err != nil {
		return nil, err
	}
	if err := pc.Start(); err != nil {
		return nil, err
	}
	defer pc.Shutdown()
	got := []seen{}
	deadline := time.Now().Add(cfg.timeout)
	for len(got) < n && time.Now().Before(deadline) {
		cr, err := pc.Poll(context.Background(), time.Second)
		if consumer.IsNoNewMsgError(err) {
			continue
		}
		if err != nil {
			return map[string]any{"received": got}, fmt.Errorf("poll: %w", err)
		}
		for _, m := range cr.GetMsgList() {
			got = append(got, view(m))
		}
		pc.ACK(context.Background(), cr, consumer.ConsumeSuccess)
	}
	if len(got) < n {
		return map[string]any{"received": got}, fmt.Errorf("%d of %d messages polled", len(got), n)
	}
	return map[string]any{"topic": t, "received": got}, nil
}

func scenarioOrderly() (map[string]any, error) {
	t := topic("orderly")
	p, err := newProducer("orderly-producer", producer.WithQueueSelector(producer.NewHashQueueSelector()))
	if err != nil {
		return nil, err
	}
	defer p.Shutdown()
	const orders, steps = 3, 6
	queueOf := map[string]int{}
	for s := 0; s < steps; s++ {
		for o := 0; o < orders; o++ {
			order := fmt.Sprintf("order-%d", o)
			m := primitive.NewMessage(t, []byte(fmt.Sprintf("%s step %d", order, s)))
			m.WithTag("TagOrder")
			m.WithShardingKey(order)
			m.WithProperty("u-order", order)
			m.WithProperty("u-step", strconv.Itoa(s))
			r, err := p.SendSync(context.Background(), m)
			if err != nil {
				return nil, fmt.Errorf("send %s step %d: %w", order, s, err)
			}
			queueOf[order] = r.MessageQueue.QueueId
		}
	}
	c := newCollector(orders * steps)
	pc, err := startPush("orderly-consumer", group("orderly-consumer"), t, pushOptions{orderly: true, from: consumer.ConsumeFromFirstOffset}, c)
	if err != nil {
		return nil, err
	}
	defer pc.Shutdown()
	err = c.wait(300 * time.Millisecond)
	return map[string]any{"topic": t, "queue_of_order": queueOf, "received": c.messages()}, err
}

type txListener struct {
	mu      sync.Mutex
	checked []string
	// bothChecked is closed once each of the two unknown transactions was checked back
	bothChecked chan struct{}
	once        sync.Once
}

func (l *txListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	switch m.GetProperty("u-outcome") {
	case "commit":
		return primitive.CommitMessageState
	case "rollback":
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (l *txListener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	l.mu.Lock()
	l.checked = append(l.checked, m.GetProperty("u-outcome"))
	distinct := map[string]bool{}
	for _, c := range l.checked {
		distinct[c] = true
	}
	if len(distinct) == 2 {
		l.once.Do(func() { close(l.bothChecked) })
	}
	l.mu.Unlock()
	if m.GetProperty("u-outcome") == "unknown-then-commit" {
		return primitive.CommitMessageState
	}
	return primitive.RollbackMessageState
}

func scenarioTransaction() (map[string]any, error) {
	t := topic("tx")
	l := &txListener{bothChecked: make(chan struct{})}
	p, err := rocketmq.NewTransactionProducer(l,
		producer.WithNameServer(nameserver()),
		producer.WithGroupName(group("tx-producer")),
		producer.WithInstanceName(group("tx-producer")),
		producer.WithRetry(2),
	)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	defer p.Shutdown()
	results := map[string]any{}
	for _, outcome := range []string{"commit", "rollback", "unknown-then-commit", "unknown-then-rollback"} {
		m := primitive.NewMessage(t, []byte("tx "+outcome))
		m.WithTag("TagTx")
		m.WithKeys([]string{"tx-" + outcome})
		m.WithProperty("u-outcome", outcome)
		r, err := p.SendMessageInTransaction(context.Background(), m)
		if err != nil {
			return nil, fmt.Errorf("send %s: %w", outcome, err)
		}
		results[outcome] = map[string]any{"status": int(r.Status), "state": int(r.State), "msg_id": r.MsgID}
	}
	// the committed one at once, the unknown one committed by the check-back; none of the others
	c := newCollector(2)
	pc, err := startPush("tx-reader", group("tx-reader"), t, pushOptions{from: consumer.ConsumeFromFirstOffset}, c)
	if err != nil {
		return nil, err
	}
	defer pc.Shutdown()
	err = c.wait(500 * time.Millisecond)
	if err == nil {
		select {
		case <-l.bothChecked:
		case <-time.After(cfg.timeout):
			err = errors.New("the unknown transactions were not both checked back")
		}
	}
	l.mu.Lock()
	checked := append([]string(nil), l.checked...)
	l.mu.Unlock()
	return map[string]any{"topic": t, "sent": results, "checked": checked, "received": c.messages()}, err
}

func scenarioOffsetResume() (map[string]any, error) {
	t := topic("resume")
	p, err := newProducer("resume-producer")
	if err != nil {
		return nil, err
	}
	defer p.Shutdown()
	send := func(from, to int) error {
		for i := from; i < to; i++ {
			if _, err := p.SendSync(context.Background(), message(t, i, "TagResume")); err != nil {
				return fmt.Errorf("send %d: %w", i, err)
			}
		}
		return nil
	}
	if err := send(0, 4); err != nil {
		return nil, err
	}
	first := newCollector(4)
	pc, err := startPush("resume-consumer", group("resume-consumer")+"-1", t, pushOptions{from: consumer.ConsumeFromFirstOffset}, first)
	if err != nil {
		return nil, err
	}
	err = first.wait(200 * time.Millisecond)
	// the push consumer persists its offsets every 5 s (and at shutdown: writes it does not wait
	// for, which the broker may still be reading when the client resets the connection)
	time.Sleep(time.Duration(resumeGapMs) * time.Millisecond)
	pc.Shutdown()
	if err != nil {
		return map[string]any{"first": first.messages()}, fmt.Errorf("first consumer: %w", err)
	}
	if err := send(4, 7); err != nil {
		return nil, err
	}
	second := newCollector(3)
	pc, err = startPush("resume-consumer", group("resume-consumer")+"-2", t, pushOptions{from: consumer.ConsumeFromFirstOffset}, second)
	if err != nil {
		return nil, err
	}
	defer pc.Shutdown()
	err = second.wait(time.Second)
	return map[string]any{"topic": t, "first": first.messages(), "second": second.messages()}, err
}

func scenarioRetry() (map[string]any, error) {
	t := topic("retry")
	p, err := newProducer("retry-producer")
	if err != nil {
		return nil, err
	}
	defer p.Shutdown()
	const n = 2
	for i := 0; i < n; i++ {
		if _, err := p.SendSync(context.Background(), message(t, i, "TagRetry")); err != nil {
			return nil, fmt.Errorf("send %d: %w", i, err)
		}
	}
	// each message is refused once (RECONSUME_LATER, delay level 1: 1 s), then accepted
	c := newCollector(2 * n)
	pc, err := rocketmq.NewPushConsumer(
		consumer.WithNameServer(nameserver()),
		consumer.WithGroupName(group("retry-consumer")),
		consumer.WithInstance(group("retry-consumer")),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		return nil, err
	}
	err = pc.Subscribe(t, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			c.add(ms...)
			for _, m := range ms {
				if m.ReconsumeTimes == 0 {
					if cc, ok := primitive.GetConcurrentlyCtx(ctx); ok {
						cc.DelayLevelWhenNextConsume = 1
					}
					return consumer.ConsumeRetryLater, nil
				}
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		return nil, err
	}
	if err := pc.Start(); err != nil {
		return nil, err
	}
	defer pc.Shutdown()
	err = c.wait(500 * time.Millisecond)
	return map[string]any{"topic": t, "received": c.messages()}, err
}

func scenarioSQLFilter() (map[string]any, error) {
	t := topic("sql")
	p, err := newProducer("sql-producer")
	if err != nil {
		return nil, err
	}
	defer p.Shutdown()
	for i := 0; i < 6; i++ {
		if _, err := p.SendSync(context.Background(), message(t, i, "TagSql")); err != nil {
			return nil, fmt.Errorf("send %d: %w", i, err)
		}
	}
	c := newCollector(3)
	sel := consumer.MessageSelector{Type: consumer.SQL92, Expression: "num IN ('1', '3', '5')"}
	pc, err := startPush("sql-consumer", group("sql-consumer"), t, pushOptions{selector: sel, from: consumer.ConsumeFromFirstOffset}, c)
	if err != nil {
		return nil, err
	}
	defer pc.Shutdown()
	err = c.wait(time.Second)
	return map[string]any{"topic": t, "received": c.messages()}, err
}

var scenarios = []struct {
	name string
	run  func() (map[string]any, error)
}{
	{"admin", scenarioAdmin},
	{"sync_send", scenarioSync},
	{"async_send", scenarioAsync},
	{"oneway", scenarioOneway},
	{"batch", scenarioBatch},
	{"delay", scenarioDelay},
	{"tag_filter", scenarioTagFilter},
	{"pull_consumer", scenarioPull},
	{"orderly", scenarioOrderly},
	{"transaction", scenarioTransaction},
	{"offset_resume", scenarioOffsetResume},
	{"retry", scenarioRetry},
	{"sql_filter", scenarioSQLFilter},
}

func main() {
	flag.StringVar(&cfg.nameserver, "namesrv", "", "name server address host:port")
	flag.StringVar(&cfg.broker, "broker", "", "broker remoting address host:port (for the admin API)")
	flag.StringVar(&cfg.run, "run", strconv.FormatInt(time.Now().UnixMilli(), 36), "suffix of topic and group names")
	timeoutS := flag.Float64("timeout-s", 15, "what one scenario may wait for its messages")
	only := flag.String("only", "", "comma-separated scenarios to run (all when empty)")
	parallel := flag.Bool("parallel", true, "run the scenarios concurrently")
	logLevel := flag.String("log-level", "error", "the Go client's log level")
	flag.IntVar(&resumeGapMs, "resume-gap-ms", 5500, "offset_resume: how long the first consumer runs after its messages (the client persists offsets every 5 s)")
	flag.Parse()
	if cfg.nameserver == "" || cfg.broker == "" {
		fmt.Fprintln(os.Stderr, "goclients: -namesrv and -broker are required")
		os.Exit(2)
	}
	rlog.SetLogLevel(*logLevel)
	cfg.timeout = time.Duration(*timeoutS * float64(time.Second))
	cfg.only = map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s != "" {
			cfg.only[s] = true
		}
	}
	var wg sync.WaitGroup
	for _, s := range scenarios {
		if len(cfg.only) > 0 && !cfg.only[s.name] {
			continue
		}
		s := s
		one := func() {
			defer wg.Done()
			start := time.Now()
			fields, err := s.run()
			if fields == nil {
				fields = map[string]any{}
			}
			fields["elapsed_ms"] = time.Since(start).Milliseconds()
			emit(s.name, fields, err)
		}
		wg.Add(1)
		if *parallel {
			go one()
		} else {
			one()
		}
	}
	wg.Wait()
}
