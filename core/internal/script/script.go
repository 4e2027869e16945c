// Package script holds the limiter's Lua scripts and their protocol: which
// keys and arguments a script call takes, how several decisions travel in
// one call, and how replies are read. It knows nothing of round trips, and
// nothing of the package slidelimit's types.
package script

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed prelude.lua
	preludeSource string
	//go:embed exact.lua
	exactLogSource string
	//go:embed stepped.lua
	steppedLogSource string
	//go:embed decide.lua
	decideSource string
	//go:embed inflight.lua
	inflightSource string
	//go:embed settle.lua
	settleSource string
	//go:embed reset.lua
	resetSource string
	//go:embed block.lua
	blockSource string
	//go:embed blocked.lua
	blockedSource string
)

// The allow script decides requests (decide.lua describes its protocol).
// It comes in three forms made of the same files: allowSource decides any
// plan; exactSource, without the other logs' functions, only plans whose
// limits are all exact, and steppedSource only plans of one stepped log.
// Redis makes every function of a script anew at each call, so a form
// without the functions a plan never calls costs Redis less at each call.
var (
	allowSource   = logsSource + decideSource
	exactSource   = preludeSource + exactLogSource + decideSource
	steppedSource = preludeSource + steppedLogSource + decideSource
)

// logsSource is the code of every log, which a script that may meet any of
// them starts with.
var logsSource = preludeSource + exactLogSource + steppedLogSource + inflightSource

// The scripts, run by EVALSHA and sent whole only when Redis answers
// NOSCRIPT: after SCRIPT FLUSH, a restart, a failover or on a new cluster
// shard.
var (
	// Allow decides requests of any plan, alone or in the batch form.
	Allow = redis.NewScript(allowSource)
	// Exact decides a request of a plan whose limits are all exact.
	Exact = redis.NewScript(exactSource)
	// Stepped decides a request of a plan whose limits all count one
	// stepped log.
	Stepped = redis.NewScript(steppedSource)
	// Settle corrects what one admitted request recorded, and its leases
	// (settle.lua describes its protocol).
	Settle = redis.NewScript(logsSource + settleSource)
	// Reset deletes an identity's keys.
	Reset = redis.NewScript(resetSource)
	// Block records a block of an identity.
	Block = redis.NewScript(blockSource)
	// Blocked reads how long a block has left.
	Blocked = redis.NewScript(blockedSource)
)

// Boxed once, so that no command boxes them again.
var (
	evalshaArg     any = "evalsha"
	allowHashArg   any = Allow.Hash()
	exactHashArg   any = Exact.Hash()
	steppedHashArg any = Stepped.Hash()
)

// formOf returns the form of the allow script whose boxed hash is hash.
func formOf(hash any) *redis.Script {
	switch hash {
	case exactHashArg:
		return Exact
	case steppedHashArg:
		return Stepped
	}
	return Allow
}

// sources holds each form's source by its script.
var sources = map[*redis.Script]string{Allow: allowSource, Exact: exactSource, Stepped: steppedSource}

// Command is the EVALSHA of the allow script deciding one request: "evalsha",
// the script's hash, the number of keys, the keys, then ARGV. It is built
// once, and a call sent alone goes to the client as it is.
type Command []any

// NewCommand returns a Command of nkeys keys and nargs arguments, to be
// appended in that order.
func NewCommand(nkeys, nargs int) Command {
	cmd := make(Command, 3, 3+nkeys+nargs)
	cmd[0], cmd[1], cmd[2] = evalshaArg, allowHashArg, nkeys
	return cmd
}

// NKeys returns how many keys cmd names.
func (cmd Command) NKeys() int { return cmd[2].(int) }

// FirstKey returns the first key cmd names.
func (cmd Command) FirstKey() string { return cmd[3].(string) }

// Script returns the script cmd runs.
func (cmd Command) Script() *redis.Script { return formOf(cmd[1]) }

// Keys returns the keys cmd names.
func (cmd Command) Keys() []string {
	keys := make([]string, cmd.NKeys())
	for i := range keys {
		keys[i] = cmd[3+i].(string)
	}
	return keys
}

// Args returns cmd's ARGV.
func (cmd Command) Args() []any { return cmd[3+cmd.NKeys():] }

// Eval returns cmd as an EVAL of its script's source, in a slice of its
// own, for a Redis that answered NOSCRIPT.
func (cmd Command) Eval() []any {
	out := make([]any, len(cmd))
	copy(out, cmd)
	out[0], out[1] = "eval", sources[cmd.Script()]
	return out
}

// Batch returns the arguments of one call of the allow script's batch
// form deciding every command of cmds in order: by EVAL if eval, else by
// EVALSHA. It runs the form the commands share (see Exact), or the allow
// script if they take different forms. A command whose ARGV is the one
// before it but for the request id goes as a repeat of that one, two
// arguments rather than all of its own: Redis's cost of a call grows with
// its arguments, and the commands of one batch are mostly of one Limiter.
func Batch(cmds []Command, eval bool) []any {
	nkeys, nargs, hash := 0, 1, cmds[0][1]
	for i, c := range cmds {
		nkeys += c.NKeys()
		if i > 0 && repeats(cmds[i-1], c) {
			nargs += 2
		} else {
			nargs += 1 + len(c.Args())
		}
		if c[1] != hash {
			hash = allowHashArg
		}
	}
	args := make([]any, 0, 3+nkeys+nargs)
	if eval {
		args = append(args, "eval", sources[formOf(hash)], nkeys)
	} else {
		args = append(args, evalshaArg, hash, nkeys)
	}
	for _, c := range cmds {
		args = append(args, c[3:3+c.NKeys()]...)
	}
	args = append(args, "*")
	for i, c := range cmds {
		if i > 0 && repeats(cmds[i-1], c) {
			args = append(args, repeatArg, c.Args()[1])
			continue
		}
		args = append(args, c[2]) // the request's number of keys
		args = append(args, c.Args()...)
	}
	return args
}

// repeatArg stands in the batch form for a request's number of keys when
// the request repeats the one before it (decide.lua).
var repeatArg any = "="

// repeats reports whether c's keys are as many as prev's and its ARGV is
// prev's but for the request id (ARGV[2]). A Command holds only strings
// and integers (Plan.Command), so comparing its elements cannot panic.
func repeats(prev, c Command) bool {
	if len(prev) != len(c) || prev[2] != c[2] {
		return false
	}
	for i := 3 + c.NKeys(); i < len(c); i++ {
		if i != 4+c.NKeys() && prev[i] != c[i] {
			return false
		}
	}
	return true
}

// BatchReply returns the reply of request i of a batch whose command
// returned replies and err.
func BatchReply(replies []any, i int, err error) ([]int64, error) {
	switch {
	case err != nil:
		return nil, err
	case len(replies) <= i:
		return nil, fmt.Errorf("allow script: a batch reply of %d for more requests", len(replies))
	}
	if err, ok := replies[i].(error); ok {
		return nil, err
	}
	return Reply(replies[i], nil)
}

// Reply returns the allow script's reply to one request, v as a call
// returned it with err: its array of integers, or the short reply, one
// integer, as a slice of one (Plan.Decode reads both).
func Reply(v any, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	switch r := v.(type) {
	case int64:
		return []int64{r}, nil
	case []any:
		out := make([]int64, len(r))
		for j, e := range r {
			n, ok := e.(int64)
			if !ok {
				return nil, fmt.Errorf("allow script: unexpected value %v in a reply", e)
			}
			out[j] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("allow script: unexpected reply %v", v)
}

// Work is measured in Redis time, in units of about workUnit µs each: a
// decision costs partWork per key it reads and writes, whatever its cost
// (no log's work grows with the units a request takes).
const (
	workUnit = 10 // µs, about
	partWork = 2  // per key of a decision
	// maxWork bounds the work of one call of the batch form: about 500
	// µs of Redis time.
	maxWork = 500 / workUnit
	// maxArgs bounds the arguments (keys and ARGV) of one call of the
	// batch form, below the 3,999 that ElastiCache Serverless accepts in
	// one command.
	maxArgs = 3_900
)

// Work returns the estimated Redis time cmd takes, in work units.
func (cmd Command) Work() int {
	return partWork * cmd.NKeys()
}

// Chunks splits cmds, in order, into the groups that each go to Redis as
// one call of the batch form (Batch), so that no call keeps Redis busy for
// long and none is refused for its length: a group carries at most maxWork
// of work and maxArgs arguments, or one command alone.
func Chunks(cmds []Command) [][]Command {
	var out [][]Command
	from, work, args := 0, 0, 1
	for i, c := range cmds {
		w, a := c.Work(), 1+len(c)-3
		if i > from && (work+w > maxWork || args+a > maxArgs) {
			out = append(out, cmds[from:i:i])
			from, work, args = i, 0, 1
		}
		work += w
		args += a
	}
	if from < len(cmds) {
		out = append(out, cmds[from:len(cmds):len(cmds)])
	}
	return out
}
