package mongostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math/big"
	"strconv"
	"time"

	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/services/auth/internal/account"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Throttle is the account.ThrottleStore on MongoDB (and FerretDB). Every
// admitted attempt is one insert of a slot document whose _id is
//
//	<key>#<window>#<round>#<ordinal>
//
// with ordinal 1..rule.Max: a unique _id is inserted once on every server,
// so however many attempts race, at most rule.Max of them get a slot of
// one window and round. The window is the index of the fixed interval of
// rule.Window that holds the attempt; the round counts the locks that
// reached into that window (0 until the first). A success deletes its slot
// (by _id and the ticket's random nonce, so a slot taken again after a
// Reset is never deleted by the attempt that held it before); a failure
// keeps it until its window ends.
//
// Why slots and not a counter (`$inc` with `upsert` on <key>#<window>,
// the MongoDB idiom): both are atomic on the embedded server (its patch
// serialises updates per collection; TestThrottlePrimitive* check the
// primitives used here under 200 concurrent callers), but there an update
// that changes a document costs two to three inserts. Measured by
// TestThrottleCommandCosts (THROTTLE_COSTS=1: FerretDB's CPU per command,
// 1,000 each, one client, 2-core development machine, 2026-11-29):
// insertOne 260 µs, insertMany of 2 400 µs, deleteMany of 2 by _id
// 490 µs, findOne by _id 340 µs; findOneAndUpdate of a conditional $inc
// with upsert 660 µs, updateOne $inc 740 µs, updateMany $inc of 2 840 µs.
// A sign-in's two keys admitted and given back: 890 µs as slots, 2,160 µs
// as counters (two findOneAndUpdate and one updateMany). On MongoDB either
// is cheap; the slots stay while the embedded server is the one measured.
//
// Each key has a state document (_id = key) only once it was locked: the
// window and round that open after the lock, the lock's end and the number
// of locks (for the doubling). A sign-in does not read it: a key whose
// slots can be closed (every rule of the sign-in's keys; see closable)
// marks a lock in the slots themselves, so only an attempt that finds
// every slot of round 0 taken reads the state. The lock's
// attempt fills every slot of the round (a slot given back meanwhile
// included) and round 0 of every later window the lock reaches, and stops
// the round's slots from being given back; so an attempt during a lock
// finds round 0 full, reads the state and is refused, and after the lock
// tries the round the state names. Keys with larger limits read the state
// before every attempt.
//
// A sign-in of two keys is therefore one insert of both first slots (an
// account's slot 1, an address's at a random ordinal), and on success one
// delete of both (Release, or Succeed when the account had other attempts). Expiry is the service's: slots carry the end of their
// window (and are ignored after it, the window index changes), and Forget
// deletes what has expired.
type Throttle struct{ c *mongo.Collection }

// NewThrottle returns the throttle store of db.
func NewThrottle(db *mongo.Database) *Throttle {
	return &Throttle{c: db.Collection(ThrottleCollection)}
}

// sequentialMax is the largest Max whose slots are all probed before an
// attempt is refused (in order from 1, or round from a random slot):
// exact, and at most sequentialMax inserts per attempt. Larger limits
// (a global cap) are probed at randomProbes random ordinals: still never
// more than Max admitted, but an attempt may be refused a little before
// every slot is taken. closeMaxSlots bounds the slots a lock writes to
// close a round and the windows it reaches.
const (
	sequentialMax = 64
	randomProbes  = 8
	orderedMax    = 8 // limits up to this are probed from slot 1 (Ticket.Fresh)
	closeMaxSlots = 1024
)

// closedNonce marks a slot no attempt holds: one a lock wrote, or one a
// lock stopped from being given back.
const closedNonce = "closed"

type throttleState struct {
	ID          string    `bson:"_id"`
	Key         string    `bson:"key"` // = ID: Reset deletes the key's documents by key
	Window      int64     `bson:"w"`   // the window of Round
	Round       int       `bson:"r"`   // the round open in Window after the lock
	Locks       int       `bson:"locks"`
	LockedUntil time.Time `bson:"lockedUntil"`
	Touched     time.Time `bson:"touched"`
}

type throttleSlot struct {
	ID      string    `bson:"_id"`
	Key     string    `bson:"key"`
	Nonce   string    `bson:"t"`
	At      time.Time `bson:"at"`
	Expires time.Time `bson:"expires"`
}

// windowOf returns the index of the fixed window of length w holding now,
// and its end.
func windowOf(now time.Time, w time.Duration) (int64, time.Time) {
	ms := windowMS(w)
	idx := now.UnixMilli() / ms
	return idx, time.UnixMilli((idx + 1) * ms).UTC()
}

func windowMS(w time.Duration) int64 {
	if w < time.Millisecond {
		w = time.Millisecond
	}
	return w.Milliseconds()
}

// closable reports whether a lock of rule can be written into the slots
// (so that attempts need not read the key's state): without locks there
// is nothing to mark; with them, the round and every later window a lock
// reaches must be fillable.
func closable(rule account.ThrottleRule) bool {
	if rule.Lock <= 0 {
		return true
	}
	if rule.Max > sequentialMax {
		return false
	}
	longest := max(rule.Lock, rule.LockMax)
	windows := int64(longest/max(rule.Window, time.Millisecond)) + 2
	return int64(rule.Max)*windows <= closeMaxSlots
}

func slotID(key string, w int64, round, ordinal int) string {
	return key + "#" + strconv.FormatInt(w, 10) + "#" + strconv.Itoa(round) + "#" + strconv.Itoa(ordinal)
}

func nonce() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func randomOrdinal(max int) (int, error) {
	n, err := rand.Int(rand.Reader, big.NewInt(int64(max)))
	if err != nil {
		return 0, err
	}
	return int(n.Int64()) + 1, nil
}

// firstOrdinal is the slot an attempt tries first: 1 for small limits (so
// slot 1 taken means no earlier attempt), a random one for larger ones (so
// attempts in flight from one address do not all try the same slots).
func firstOrdinal(max int) (int, error) {
	if max <= orderedMax {
		return 1, nil
	}
	return randomOrdinal(max)
}

// states reads the state documents of keys in one round trip: by key,
// those that exist.
func (t *Throttle) states(ctx context.Context, keys []string) (map[string]throttleState, error) {
	var filter bson.D
	if len(keys) == 1 {
		filter = bson.D{{Key: "_id", Value: keys[0]}}
	} else {
		filter = bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: keys}}}}
	}
	cur, err := t.c.Find(ctx, filter)
	if err != nil {
		return nil, err
	}
	var docs []throttleState
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make(map[string]throttleState, len(docs))
	for _, st := range docs {
		st.LockedUntil = st.LockedUntil.UTC()
		out[st.ID] = st
	}
	return out, nil
}

// Admit implements account.ThrottleStore. The first slot of each key is
// inserted at once (one round trip), after one read of the keys' states
// when a key's rule is not closable. A key whose first slot is taken tries
// the other slots of its round once; if every one is taken, the tickets of
// later keys are given back (an attempt that waits for a key never holds
// a later one), the states are read, and the key and those after it are
// admitted one after the other, waiting for attempts in flight or locking.
// A key that refuses gives back what was taken.
func (t *Throttle) Admit(ctx context.Context, now time.Time, reqs ...account.ThrottleRequest) ([]account.Ticket, error) {
	var states map[string]throttleState // nil: not read (every rule closable)
	for _, r := range reqs {
		if !closable(r.Rule) {
			var err error
			if states, err = t.readStates(ctx, now, reqs); err != nil {
				return nil, err
			}
			break
		}
	}
	got, ords, err := t.firstSlots(ctx, now, reqs, states)
	if err != nil {
		return nil, err
	}
	for i, r := range reqs {
		if got[i].Slot != "" {
			continue
		}
		st, exists := states[r.Key]
		round := 0
		w, end := windowOf(now, r.Rule.Window)
		if exists && st.Window == w {
			round = st.Round
		}
		a := attempt{t: t, key: r.Key, now: now, end: end, w: w, round: round}
		tk, err := a.probeOnce(ctx, r.Rule.Max, ords[i])
		if err != nil {
			return nil, t.giveBack(ctx, err, got)
		}
		if tk.Slot != "" {
			got[i] = tk
			continue
		}
		// Every slot of the round is taken: the slow way from this key on.
		if err := t.Release(ctx, got[i+1:]...); err != nil {
			return nil, t.giveBack(ctx, err, got[:i])
		}
		tickets, err := t.admitInTurn(ctx, now, reqs[i:])
		if err != nil {
			return nil, t.giveBack(ctx, err, got[:i])
		}
		return append(got[:i], tickets...), nil
	}
	return got, nil
}

// readStates reads the states of reqs' keys: *ThrottledError naming the
// first locked key.
func (t *Throttle) readStates(ctx context.Context, now time.Time, reqs []account.ThrottleRequest) (map[string]throttleState, error) {
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key
	}
	states, err := t.states(ctx, keys)
	if err != nil {
		return nil, err
	}
	for _, r := range reqs { // a locked key refuses before any slot is taken
		if st := states[r.Key]; st.LockedUntil.After(now) {
			return nil, &account.ThrottledError{RetryAfter: st.LockedUntil.Sub(now), Key: r.Key}
		}
	}
	return states, nil
}

// admitInTurn reads the keys' states and admits reqs one after the other.
func (t *Throttle) admitInTurn(ctx context.Context, now time.Time, reqs []account.ThrottleRequest) ([]account.Ticket, error) {
	states, err := t.readStates(ctx, now, reqs)
	if err != nil {
		return nil, err
	}
	tickets := make([]account.Ticket, 0, len(reqs))
	for _, r := range reqs {
		st, exists := states[r.Key]
		if !exists {
			st = throttleState{ID: r.Key, Key: r.Key}
		}
		tk, err := t.admit(ctx, st, exists, r.Rule, now)
		if err != nil {
			return nil, t.giveBack(ctx, err, tickets)
		}
		tickets = append(tickets, tk)
	}
	return tickets, nil
}

// giveBack releases tickets after err and returns err (joined with the
// release's).
func (t *Throttle) giveBack(ctx context.Context, err error, tickets []account.Ticket) error {
	if rerr := t.Release(context.WithoutCancel(ctx), tickets...); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// firstSlots inserts the first slot of each request's key (in round 0,
// or the round states name) in one unordered insert: a ticket per
// request, without a slot where that slot was taken, and the ordinals
// tried.
func (t *Throttle) firstSlots(ctx context.Context, now time.Time, reqs []account.ThrottleRequest, states map[string]throttleState) ([]account.Ticket, []int, error) {
	docs := make([]any, len(reqs))
	out := make([]account.Ticket, len(reqs))
	ords := make([]int, len(reqs))
	for i, r := range reqs {
		w, end := windowOf(now, r.Rule.Window)
		st, exists := states[r.Key]
		round := 0
		if exists && st.Window == w {
			round = st.Round
		}
		ord, err := firstOrdinal(r.Rule.Max)
		if err != nil {
			return nil, nil, err
		}
		n, err := nonce()
		if err != nil {
			return nil, nil, err
		}
		ords[i] = ord
		sl := throttleSlot{ID: slotID(r.Key, w, round, ord), Key: r.Key, Nonce: n, At: now, Expires: end}
		docs[i] = sl
		fresh := r.Rule.Max <= orderedMax && ord == 1 && round == 0 && st.Locks == 0
		out[i] = account.Ticket{Key: r.Key, Slot: sl.ID, Nonce: n, Fresh: fresh}
	}
	_, err := t.c.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err == nil {
		return out, ords, nil
	}
	var bw mongo.BulkWriteException
	if !errors.As(err, &bw) || bw.WriteConcernError != nil || len(bw.WriteErrors) == 0 {
		return nil, nil, t.giveBack(ctx, err, out) // what was inserted is unknown
	}
	for _, we := range bw.WriteErrors {
		if !mongox.IsDuplicate(we.WriteError) || we.Index < 0 || we.Index >= len(out) {
			return nil, nil, t.giveBack(ctx, err, out)
		}
		out[we.Index] = account.Ticket{}
	}
	return out, ords, nil
}

// admit takes a slot of the key of st (read before, exists when it was
// there) in the round open now, or locks the key when every slot of the
// round is taken.
func (t *Throttle) admit(ctx context.Context, st throttleState, exists bool, rule account.ThrottleRule, now time.Time) (account.Ticket, error) {
	w, end := windowOf(now, rule.Window)
	round := 0
	if exists && st.Window == w {
		round = st.Round
	}
	a := attempt{t: t, key: st.ID, now: now, end: end, w: w, round: round}
	var (
		tk  account.Ticket
		err error
	)
	if rule.Max <= sequentialMax {
		tk, err = a.probeAll(ctx, rule.Max, round == 0 && (!exists || st.Locks == 0))
	} else {
		tk, err = a.probeRandom(ctx, rule.Max)
	}
	if err != nil || tk.Slot != "" {
		return tk, err
	}
	// Every slot of this round is taken: lock the key.
	return account.Ticket{}, t.lock(ctx, st, exists, rule, now, w, round, end)
}

// attempt is one Admit's try at the slots of one key, window and round.
type attempt struct {
	t        *Throttle
	key      string
	w        int64
	round    int
	now, end time.Time
}

// try inserts slot ordinal: the ticket, or none when the slot is taken.
func (a attempt) try(ctx context.Context, ordinal int) (account.Ticket, error) {
	n, err := nonce()
	if err != nil {
		return account.Ticket{}, err
	}
	id := slotID(a.key, a.w, a.round, ordinal)
	_, err = a.t.c.InsertOne(ctx, throttleSlot{ID: id, Key: a.key, Nonce: n, At: a.now, Expires: a.end})
	if err == nil {
		return account.Ticket{Key: a.key, Slot: id, Nonce: n}, nil
	}
	if mongox.IsDuplicate(err) {
		return account.Ticket{}, nil
	}
	return account.Ticket{}, err
}

// probeAll tries every slot 1..max before giving up, and waits (at most
// inFlightFor) while attempts still in flight hold them. Small limits (an
// account's) are probed from slot 1, so taking slot 1 means the attempt
// is the key's first (Ticket.Fresh, when first says no lock came before).
// Larger ones (an address's, shared by every sign-in from behind one
// proxy) are probed from a random slot round all of them: k attempts in
// flight cost about max/(max-k) inserts each, not k. A ticket without a
// slot means every slot is taken by attempts that ended.
func (a attempt) probeAll(ctx context.Context, max int, first bool) (account.Ticket, error) {
	start := 0
	if max > orderedMax {
		n, err := randomOrdinal(max)
		if err != nil {
			return account.Ticket{}, err
		}
		start = n - 1
	}
	deadline := time.Now().Add(inFlightFor) // the wall clock: now is the attempt's, fixed
	for {
		for j := range max {
			i := (start+j)%max + 1
			tk, err := a.try(ctx, i)
			if err != nil || tk.Slot != "" {
				tk.Fresh = max <= orderedMax && i == 1 && first
				return tk, err
			}
		}
		// Every slot is taken. Attempts still in flight hold theirs until
		// they end (a success gives it back): wait for them rather than
		// count concurrent right answers as failures.
		busy, err := a.inFlight(ctx, max)
		if err != nil || !busy || !time.Now().Before(deadline) {
			return account.Ticket{}, err
		}
		select {
		case <-ctx.Done():
			return account.Ticket{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// probeRandom tries randomProbes random slots of 1..max (a global cap).
func (a attempt) probeRandom(ctx context.Context, max int) (account.Ticket, error) {
	for range randomProbes {
		i, err := randomOrdinal(max)
		if err != nil {
			return account.Ticket{}, err
		}
		tk, err := a.try(ctx, i)
		if err != nil || tk.Slot != "" {
			return tk, err
		}
	}
	return account.Ticket{}, nil
}

// probeOnce tries the slots of 1..max other than tried once each (from a
// random one: attempts in flight at once spread over the free slots), or
// randomProbes random ones of a larger limit; no ticket when every one
// tried was taken.
func (a attempt) probeOnce(ctx context.Context, max, tried int) (account.Ticket, error) {
	if max > sequentialMax {
		return a.probeRandom(ctx, max)
	}
	start, err := randomOrdinal(max)
	if err != nil {
		return account.Ticket{}, err
	}
	for j := range max {
		i := (start+j-1)%max + 1
		if i == tried {
			continue
		}
		tk, err := a.try(ctx, i)
		if err != nil || tk.Slot != "" {
			return tk, err
		}
	}
	return account.Ticket{}, nil
}

// lock records that round of window w is full and returns the
// *account.ThrottledError to answer. Without a lock duration, the key stays
// refused until the window (ending at end) ends: every attempt probes
// again. Of attempts racing to lock the same round, one writes the state
// (an insert of it, or an update conditional on the state read) and the
// others answer with its lock.
func (t *Throttle) lock(ctx context.Context, st throttleState, exists bool, rule account.ThrottleRule, now time.Time, w int64, round int, end time.Time) error {
	if rule.Lock <= 0 {
		return &account.ThrottledError{RetryAfter: end.Sub(now), Key: st.ID}
	}
	lock := rule.Lock
	for i := 0; i < st.Locks && (rule.LockMax <= 0 || lock < rule.LockMax); i++ {
		lock *= 2
	}
	if rule.LockMax > 0 && lock > rule.LockMax {
		lock = rule.LockMax
	}
	until := now.Add(lock)
	uw, _ := windowOf(until, rule.Window)
	next := throttleState{ID: st.ID, Key: st.ID, Window: uw, Round: 1, Locks: st.Locks + 1, LockedUntil: until, Touched: now}
	if uw == w {
		next.Round = round + 1
	}
	won := true
	if !exists {
		if _, err := t.c.InsertOne(ctx, next); mongox.IsDuplicate(err) {
			won = false
		} else if err != nil {
			return err
		}
	} else {
		read := bson.D{{Key: "_id", Value: st.ID}, {Key: "locks", Value: st.Locks}, {Key: "w", Value: st.Window}, {Key: "r", Value: st.Round}}
		if st.Key == "" { // written before the state had these fields
			read = bson.D{{Key: "_id", Value: st.ID}, {Key: "key", Value: bson.D{{Key: "$exists", Value: false}}}}
		}
		res, err := t.c.UpdateOne(ctx, read,
			bson.D{{Key: "$set", Value: bson.D{{Key: "key", Value: st.ID}, {Key: "w", Value: next.Window}, {Key: "r", Value: next.Round},
				{Key: "locks", Value: next.Locks}, {Key: "lockedUntil", Value: until}, {Key: "touched", Value: now}}}})
		if err != nil {
			return err
		}
		won = res.MatchedCount == 1
	}
	if !won { // another attempt locked this round first: answer with its lock
		states, err := t.states(ctx, []string{st.ID})
		if err != nil {
			return err
		}
		if s, ok := states[st.ID]; ok && s.LockedUntil.After(now) {
			return &account.ThrottledError{RetryAfter: s.LockedUntil.Sub(now), Key: st.ID}
		}
		return &account.ThrottledError{RetryAfter: lock, Key: st.ID}
	}
	if closable(rule) {
		if err := t.closeSlots(ctx, st.ID, rule, w, round, uw); err != nil {
			return err
		}
	}
	return &account.ThrottledError{RetryAfter: lock, Key: st.ID}
}

// closeSlots marks a lock in the slots: the full round of window w can no
// longer be given back, any slot of it given back meanwhile is filled, and
// so is round 0 of every window after w up to lastW (the lock's end),
// so that an attempt that does not read the state finds them taken.
func (t *Throttle) closeSlots(ctx context.Context, key string, rule account.ThrottleRule, w int64, round int, lastW int64) error {
	ids := make([]string, rule.Max)
	for i := range ids {
		ids[i] = slotID(key, w, round, i+1)
	}
	if _, err := t.c.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "t", Value: closedNonce}}}}); err != nil {
		return err
	}
	ms := windowMS(rule.Window)
	var docs []any
	for win := w; win <= lastW; win++ {
		r := 0
		if win == w {
			r = round
		}
		end := time.UnixMilli((win + 1) * ms).UTC()
		for i := range rule.Max {
			docs = append(docs, throttleSlot{ID: slotID(key, win, r, i+1), Key: key, Nonce: closedNonce, Expires: end})
		}
	}
	_, err := t.c.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	var bw mongo.BulkWriteException
	if err != nil && errors.As(err, &bw) && bw.WriteConcernError == nil {
		for _, we := range bw.WriteErrors {
			if !mongox.IsDuplicate(we.WriteError) {
				return err
			}
		}
		return nil // the slots already taken stay as they are
	}
	return err
}

// inFlightFor is how long after its admission a slot may belong to an
// attempt still in flight (a password hash waiting for its turn, a
// database round trip).
const inFlightFor = 5 * time.Second

// inFlight reports whether the slots of the attempt's round may still
// change soon: one was given back since they were probed, or one was
// taken less than inFlightFor before now (its attempt may still be in
// flight). Otherwise every slot belongs to an attempt that ended, a
// failure.
func (a attempt) inFlight(ctx context.Context, max int) (bool, error) {
	ids := make([]string, max)
	for i := range ids {
		ids[i] = slotID(a.key, a.w, a.round, i+1)
	}
	cur, err := a.t.c.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "at", Value: 1}}))
	if err != nil {
		return false, err
	}
	var slots []throttleSlot
	if err := cur.All(ctx, &slots); err != nil {
		return false, err
	}
	if len(slots) < max {
		return true, nil
	}
	for _, sl := range slots {
		if a.now.Sub(sl.At) < inFlightFor {
			return true, nil
		}
	}
	return false, nil
}

// Release implements account.ThrottleStore: one delete of every slot,
// each only while it is still the ticket's (its nonce).
func (t *Throttle) Release(ctx context.Context, tickets ...account.Ticket) error {
	slots := make([]string, 0, len(tickets))
	nonces := make([]string, 0, len(tickets))
	for _, tk := range tickets {
		if tk.Slot != "" {
			slots = append(slots, tk.Slot)
			nonces = append(nonces, tk.Nonce)
		}
	}
	var err error
	switch len(slots) {
	case 0:
	case 1:
		_, err = t.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: slots[0]}, {Key: "t", Value: nonces[0]}})
	default:
		_, err = t.c.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: slots}}}, {Key: "t", Value: bson.D{{Key: "$in", Value: nonces}}}})
	}
	return err
}

// Succeed ends a successful attempt in one delete: every ticket of a key
// other than reset is given back (by _id and nonce), and every document of
// reset goes (its slots, in flight or not, and its state with the lock), as
// Release and Reset would in two. The delete is narrowed by the key index.
func (t *Throttle) Succeed(ctx context.Context, reset string, tickets ...account.Ticket) error {
	keys := []string{reset}
	var slots, nonces []string
	for _, tk := range tickets {
		if tk.Key != reset && tk.Slot != "" {
			keys = append(keys, tk.Key)
			slots = append(slots, tk.Slot)
			nonces = append(nonces, tk.Nonce)
		}
	}
	if len(slots) == 0 {
		return t.Reset(ctx, reset, time.Time{})
	}
	_, err := t.c.DeleteMany(ctx, bson.D{
		{Key: "key", Value: bson.D{{Key: "$in", Value: keys}}},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "key", Value: reset}},
			bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: slots}}}, {Key: "t", Value: bson.D{{Key: "$in", Value: nonces}}}},
		}},
	})
	return err
}

// Check implements account.ThrottleStore.
func (t *Throttle) Check(ctx context.Context, keys []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	states, err := t.states(ctx, keys)
	if err != nil {
		return nil, err
	}
	for k, st := range states {
		out[k] = st.LockedUntil
	}
	return out, nil
}

// Reset implements account.ThrottleStore: every document of the key (its
// slots, in flight or not, and its state with the lock) goes, in one
// delete by the key's index; the attempts in flight no longer count.
func (t *Throttle) Reset(ctx context.Context, key string, _ time.Time) error {
	_, err := t.c.DeleteMany(ctx, bson.D{{Key: "key", Value: key}})
	return err
}

// Forget implements account.ThrottleStore: slots whose window has ended,
// and states neither written since before nor locked after it. It is the
// sweeper's (a query on fields other than _id).
func (t *Throttle) Forget(ctx context.Context, now, before time.Time) error {
	if _, err := t.c.DeleteMany(ctx, bson.D{{Key: "expires", Value: bson.D{{Key: "$lte", Value: now}}}}); err != nil {
		return err
	}
	_, err := t.c.DeleteMany(ctx, bson.D{
		{Key: "touched", Value: bson.D{{Key: "$lt", Value: before}}},
		{Key: "lockedUntil", Value: bson.D{{Key: "$lt", Value: before}}},
	})
	return err
}
