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

// Throttle is the account.ThrottleStore on MongoDB (and FerretDB). It does
// not count with read-modify-write updates, which FerretDB 1.24 does not
// apply atomically under concurrency; every admitted attempt is one insert
// of a slot document whose _id is
//
//	<key>#<generation>#<round>#<window>#<ordinal>
//
// with ordinal 1..rule.Max. A unique _id can be inserted once on every
// server, so however many attempts race, at most rule.Max of them get a
// slot of one window and round; the others find every slot taken and are
// throttled. The window is the fixed interval of rule.Window that holds
// the attempt (its index since the Unix epoch). Each key also has one state
// document (_id = key) with its generation (a random value written by
// Reset, so Reset needs one write whatever the count), its round (the
// number of locks it had) and the end of its current lock. The state
// document only decides lock durations: it is written by the attempts that
// find a round full and by Reset, and a lost or doubled write there can
// lengthen or shorten a lock but never admit an attempt beyond the slots.
//
// Every read and delete on the request path is by _id (one value or $in):
// a sign-in reads both its keys' states at once and gives both slots back
// with one delete. Expiry is the service's: slots carry the end of their
// window and are ignored after it (the window index changes), and Forget
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
// every slot is taken.
const (
	sequentialMax = 64
	randomProbes  = 8
	orderedMax    = 8 // limits up to this are probed from slot 1 (Ticket.Fresh)
)

type throttleState struct {
	ID          string    `bson:"_id"`
	Gen         string    `bson:"gen"`
	Round       int       `bson:"round"`
	LockedUntil time.Time `bson:"lockedUntil"`
	Touched     time.Time `bson:"touched"`
}

type throttleSlot struct {
	ID      string    `bson:"_id"`
	Key     string    `bson:"key"`
	At      time.Time `bson:"at"`
	Expires time.Time `bson:"expires"`
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

// windowOf returns the index of the fixed window of length w holding now,
// and its end.
func windowOf(now time.Time, w time.Duration) (int64, time.Time) {
	if w < time.Millisecond {
		w = time.Millisecond
	}
	ms := w.Milliseconds()
	idx := now.UnixMilli() / ms
	return idx, time.UnixMilli((idx + 1) * ms).UTC()
}

// Admit implements account.ThrottleStore: one read of every key's state,
// then the slots of each key in turn; a key that refuses gives back the
// slots taken for the keys before it.
func (t *Throttle) Admit(ctx context.Context, now time.Time, reqs ...account.ThrottleRequest) ([]account.Ticket, error) {
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
	tickets := make([]account.Ticket, 0, len(reqs))
	for _, r := range reqs {
		st, exists := states[r.Key]
		if !exists {
			st = throttleState{ID: r.Key}
		}
		tk, err := t.admit(ctx, st, exists, r.Rule, now)
		if err != nil {
			if rerr := t.Release(context.WithoutCancel(ctx), tickets...); rerr != nil {
				return nil, errors.Join(err, rerr)
			}
			return nil, err
		}
		tickets = append(tickets, tk)
	}
	return tickets, nil
}

// admit takes a slot of the key of st (read before, exists when it was
// there), or locks the key when every slot of its round is taken.
func (t *Throttle) admit(ctx context.Context, st throttleState, exists bool, rule account.ThrottleRule, now time.Time) (account.Ticket, error) {
	w, end := windowOf(now, rule.Window)
	a := attempt{t: t, key: st.ID, now: now, end: end,
		prefix: st.ID + "#" + st.Gen + "#" + strconv.Itoa(st.Round) + "#" + strconv.FormatInt(w, 10) + "#"}
	var (
		tk  account.Ticket
		err error
	)
	if rule.Max <= sequentialMax {
		tk, err = a.probeAll(ctx, rule.Max, !exists || st.Round == 0)
	} else {
		tk, err = a.probeRandom(ctx, rule.Max)
	}
	if err != nil || tk.Slot != "" {
		return tk, err
	}
	// Every slot of this round is taken: lock the key.
	return account.Ticket{}, t.lock(ctx, st, exists, rule, now, end)
}

// attempt is one Admit's try at the slots of prefix.
type attempt struct {
	t        *Throttle
	key      string
	prefix   string
	now, end time.Time
}

// try inserts slot ordinal: false when it is taken.
func (a attempt) try(ctx context.Context, ordinal int) (bool, error) {
	_, err := a.t.c.InsertOne(ctx, throttleSlot{ID: a.prefix + strconv.Itoa(ordinal), Key: a.key, At: a.now, Expires: a.end})
	if err == nil {
		return true, nil
	}
	if mongox.IsDuplicate(err) {
		return false, nil
	}
	return false, err
}

// probeAll tries every slot 1..max before giving up, and waits (at most
// inFlightFor) while attempts still in flight hold them. Small limits (an
// account's) are probed from slot 1, so taking slot 1 means the attempt
// is the key's first (Ticket.Fresh, when first says no round was locked).
// Larger ones (an address's, shared by every sign-in from behind one
// proxy) are probed from a random slot round all of them: k attempts in
// flight cost about max/(max-k) inserts each, not k. A ticket without a
// slot means every slot is taken by attempts that ended.
func (a attempt) probeAll(ctx context.Context, max int, first bool) (account.Ticket, error) {
	start := 0
	if max > orderedMax {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(max)))
		if err != nil {
			return account.Ticket{}, err
		}
		start = int(n.Int64())
	}
	deadline := time.Now().Add(inFlightFor) // the wall clock: now is the attempt's, fixed
	for {
		for j := range max {
			i := (start+j)%max + 1
			ok, err := a.try(ctx, i)
			if err != nil {
				return account.Ticket{}, err
			}
			if ok {
				fresh := max <= orderedMax && i == 1 && first
				return account.Ticket{Key: a.key, Slot: a.prefix + strconv.Itoa(i), Fresh: fresh}, nil
			}
		}
		// Every slot is taken. Attempts still in flight hold theirs until
		// they end (a success gives it back): wait for them rather than
		// count concurrent right answers as failures.
		busy, err := a.t.inFlight(ctx, a.prefix, max, a.now)
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
		n, err := rand.Int(rand.Reader, big.NewInt(int64(max)))
		if err != nil {
			return account.Ticket{}, err
		}
		i := int(n.Int64()) + 1
		ok, err := a.try(ctx, i)
		if err != nil {
			return account.Ticket{}, err
		}
		if ok {
			return account.Ticket{Key: a.key, Slot: a.prefix + strconv.Itoa(i)}, nil
		}
	}
	return account.Ticket{}, nil
}

// lock records that the round of st is full and returns the
// *account.ThrottledError to answer. Without a lock duration, the key stays
// refused until the window (ending at end) ends: every attempt probes
// again.
func (t *Throttle) lock(ctx context.Context, st throttleState, exists bool, rule account.ThrottleRule, now, end time.Time) error {
	if rule.Lock <= 0 {
		return &account.ThrottledError{RetryAfter: end.Sub(now), Key: st.ID}
	}
	lock := rule.Lock
	for i := 0; i < st.Round && (rule.LockMax <= 0 || lock < rule.LockMax); i++ {
		lock *= 2
	}
	if rule.LockMax > 0 && lock > rule.LockMax {
		lock = rule.LockMax
	}
	until := now.Add(lock)
	next := throttleState{ID: st.ID, Gen: st.Gen, Round: st.Round + 1, LockedUntil: until, Touched: now}
	if !exists {
		if _, err := t.c.InsertOne(ctx, next); err != nil && !mongox.IsDuplicate(err) {
			return err
		}
	} else {
		// Only while the state is still the one read: the attempts that
		// found the same round full write the same round.
		_, err := t.c.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: st.ID}, {Key: "gen", Value: st.Gen}, {Key: "round", Value: st.Round}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "round", Value: next.Round}, {Key: "lockedUntil", Value: until}, {Key: "touched", Value: now}}}})
		if err != nil {
			return err
		}
	}
	return &account.ThrottledError{RetryAfter: lock, Key: st.ID}
}

// inFlightFor is how long after its admission a slot may belong to an
// attempt still in flight (a password hash waiting for its turn, a
// database round trip).
const inFlightFor = 5 * time.Second

// inFlight reports whether the slots of prefix may still change soon: one
// was given back since they were probed, or one was taken less than
// inFlightFor before now (its attempt may still be in flight). Otherwise
// every slot belongs to an attempt that ended, a failure.
func (t *Throttle) inFlight(ctx context.Context, prefix string, max int, now time.Time) (bool, error) {
	ids := make([]string, max)
	for i := range ids {
		ids[i] = prefix + strconv.Itoa(i+1)
	}
	cur, err := t.c.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
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
		if now.Sub(sl.At) < inFlightFor {
			return true, nil
		}
	}
	return false, nil
}

// Release implements account.ThrottleStore: one delete of every slot.
func (t *Throttle) Release(ctx context.Context, tickets ...account.Ticket) error {
	slots := make([]string, 0, len(tickets))
	for _, tk := range tickets {
		if tk.Slot != "" {
			slots = append(slots, tk.Slot)
		}
	}
	var err error
	switch len(slots) {
	case 0:
	case 1:
		_, err = t.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: slots[0]}})
	default:
		_, err = t.c.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: slots}}}})
	}
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

// Reset implements account.ThrottleStore: a new generation, so the slots
// taken so far no longer count, and no lock.
func (t *Throttle) Reset(ctx context.Context, key string, now time.Time) error {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	st := throttleState{ID: key, Gen: hex.EncodeToString(b), Touched: now}
	_, err := t.c.ReplaceOne(ctx, bson.D{{Key: "_id", Value: key}}, st, options.Replace().SetUpsert(true))
	if mongox.IsDuplicate(err) { // a concurrent upsert inserted it first
		_, err = t.c.ReplaceOne(ctx, bson.D{{Key: "_id", Value: key}}, st)
	}
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
