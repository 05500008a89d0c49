package tracing

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gotpstub/agentexpr"
)

// errSyntax is the class of every packet syntax error.
var errSyntax = errors.New("malformed packet")

// cursor reads the fields of a packet.
type cursor struct {
	s   string
	pos int
}

func (c *cursor) done() bool { return c.pos >= len(c.s) }

func (c *cursor) rest() string { return c.s[c.pos:] }

// peek returns the next byte, 0 at the end.
func (c *cursor) peek() byte {
	if c.done() {
		return 0
	}
	return c.s[c.pos]
}

// accept consumes b if it is next.
func (c *cursor) accept(b byte) bool {
	if c.peek() == b && !c.done() {
		c.pos++
		return true
	}
	return false
}

// expect consumes b or fails.
func (c *cursor) expect(b byte) error {
	if !c.accept(b) {
		return fmt.Errorf("%w: expected %q at offset %d of %q", errSyntax, b, c.pos, c.s)
	}
	return nil
}

// hex reads a non-empty hex number of at most 16 digits.
func (c *cursor) hex() (uint64, error) {
	start := c.pos
	for !c.done() && isHexDigit(c.s[c.pos]) {
		c.pos++
	}
	if c.pos == start {
		return 0, fmt.Errorf("%w: expected a hex number at offset %d of %q", errSyntax, start, c.s)
	}
	v, err := strconv.ParseUint(c.s[start:c.pos], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: hex number %q: %w", errSyntax, c.s[start:c.pos], err)
	}
	return v, nil
}

// location parses a tracepoint location "n:addr" (both hex): the number
// and address that name one location of a tracepoint in QTDP, QTDPsrc,
// qTP, QTEnable and QTDisable.
func (c *cursor) location() (num int, addr uint64, err error) {
	if num, err = c.hexInt(); err != nil {
		return 0, 0, err
	}
	if err = c.expect(':'); err != nil {
		return 0, 0, err
	}
	addr, err = c.hex()
	return num, addr, err
}

// hexInt reads a hex number that must fit a non-negative int.
func (c *cursor) hexInt() (int, error) {
	v, err := c.hex()
	if err != nil {
		return 0, err
	}
	if v > 1<<31-1 {
		return 0, fmt.Errorf("%w: number %#x too large", errSyntax, v)
	}
	return int(v), nil
}

// upTo returns the text up to (not including) b, or to the end, and
// consumes b.
func (c *cursor) upTo(b byte) string {
	i := strings.IndexByte(c.rest(), b)
	if i < 0 {
		s := c.rest()
		c.pos = len(c.s)
		return s
	}
	s := c.s[c.pos : c.pos+i]
	c.pos += i + 1
	return s
}

func isHexDigit(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

// hexText decodes a hex-encoded string.
func hexText(s string) (string, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("%w: hex text %q: %w", errSyntax, s, err)
	}
	return string(b), nil
}

// tpHeader is the fixed part of a defining QTDP packet.
type tpHeader struct {
	num       int
	addr      uint64
	enabled   bool
	stepCount int
	passCount int
	fast      bool
	fastLen   int
	static    bool
	cond      *agentexpr.Expr
	more      bool // trailing '-': actions follow
}

// parseTPDefinition parses "n:addr:E|D:step:pass[:F<len>][:S][:X<len>,<hex>][-]"
// (after "QTDP:"), also the body of an uploaded "T" line.
func (e *Engine) parseTPDefinition(s string) (*tpHeader, error) {
	c := &cursor{s: s}
	h := &tpHeader{}
	var err error
	if h.num, err = c.hexInt(); err != nil {
		return nil, fmt.Errorf("tracepoint number: %w", err)
	}
	if err = c.expect(':'); err != nil {
		return nil, err
	}
	if h.addr, err = c.hex(); err != nil {
		return nil, fmt.Errorf("tracepoint address: %w", err)
	}
	if err = c.expect(':'); err != nil {
		return nil, err
	}
	switch {
	case c.accept('E'):
		h.enabled = true
	case c.accept('D'):
	default:
		return nil, fmt.Errorf("%w: expected E or D in %q", errSyntax, s)
	}
	if err = c.expect(':'); err != nil {
		return nil, err
	}
	if h.stepCount, err = c.hexInt(); err != nil {
		return nil, fmt.Errorf("step count: %w", err)
	}
	if err = c.expect(':'); err != nil {
		return nil, err
	}
	if h.passCount, err = c.hexInt(); err != nil {
		return nil, fmt.Errorf("pass count: %w", err)
	}
	for c.accept(':') {
		switch {
		case c.accept('F'):
			h.fast = true
			if h.fastLen, err = c.hexInt(); err != nil {
				return nil, fmt.Errorf("fast tracepoint length: %w", err)
			}
		case c.accept('S'):
			h.static = true
		case c.peek() == 'X':
			x, err := e.parseExprField(c)
			if err != nil {
				return nil, fmt.Errorf("condition: %w", err)
			}
			h.cond = x
		default:
			return nil, fmt.Errorf("%w: unknown tracepoint field at %q", errSyntax, c.rest())
		}
	}
	if c.accept('-') {
		h.more = true
	}
	if !c.done() {
		return nil, fmt.Errorf("%w: trailing %q", errSyntax, c.rest())
	}
	return h, nil
}

// parseExprField parses "X<len>,<hex>" at c and validates the bytecode.
func (e *Engine) parseExprField(c *cursor) (*agentexpr.Expr, error) {
	if err := c.expect('X'); err != nil {
		return nil, err
	}
	n, err := c.hexInt()
	if err != nil {
		return nil, fmt.Errorf("expression length: %w", err)
	}
	if err := c.expect(','); err != nil {
		return nil, err
	}
	if n > (len(c.s)-c.pos)/2 {
		return nil, fmt.Errorf("%w: expression of %d bytes but %d hex digits left", errSyntax, n, len(c.s)-c.pos)
	}
	code := c.s[c.pos : c.pos+2*n]
	c.pos += 2 * n
	x, err := agentexpr.DecodeHex(code)
	if err != nil {
		return nil, err
	}
	if err := agentexpr.Validate(x, agentexpr.Limits{NumRegs: e.numRegs, MaxStack: 1024}); err != nil {
		return nil, fmt.Errorf("invalid bytecode: %w", err)
	}
	return x, nil
}

// parseActions parses a run of actions: R<mask>, M<basereg>,<offset>,<len>,
// X<len>,<hex>. A leading S switches to while-stepping actions (stepping
// reports whether one was seen); a trailing '-' means more packets follow.
func (e *Engine) parseActions(s string) (acts []Action, stepping, more bool, err error) {
	c := &cursor{s: s}
	if c.accept('S') {
		stepping = true
	}
	for !c.done() {
		start := c.pos
		var a Action
		switch c.peek() {
		case 'R':
			c.pos++
			a.Kind = ActionRegisters
			m := c.pos
			for !c.done() && isHexDigit(c.peek()) {
				c.pos++
			}
			a.RegMask = c.s[m:c.pos]
		case 'M':
			c.pos++
			a.Kind = ActionMemory
			neg := c.accept('-')
			base, err := c.hexInt()
			if err != nil {
				return nil, false, false, fmt.Errorf("memory action base register: %w", err)
			}
			a.BaseReg = base
			if neg {
				a.BaseReg = -base
			}
			if err := c.expect(','); err != nil {
				return nil, false, false, err
			}
			if a.Offset, err = c.hex(); err != nil {
				return nil, false, false, fmt.Errorf("memory action offset: %w", err)
			}
			if err := c.expect(','); err != nil {
				return nil, false, false, err
			}
			if a.Len, err = c.hex(); err != nil {
				return nil, false, false, fmt.Errorf("memory action length: %w", err)
			}
			if a.BaseReg < -1 {
				return nil, false, false, fmt.Errorf("%w: memory action base register %d", errSyntax, a.BaseReg)
			}
			if a.BaseReg >= 0 {
				if _, ok := e.regIndex[a.BaseReg]; !ok {
					return nil, false, false, fmt.Errorf("memory action base register %d does not exist", a.BaseReg)
				}
			}
		case 'L':
			c.pos++
			a.Kind = ActionStaticData
		case 'X':
			a.Kind = ActionExpr
			x, err := e.parseExprField(c)
			if err != nil {
				return nil, false, false, fmt.Errorf("action expression: %w", err)
			}
			a.Expr = x
		case '-':
			if c.pos == len(c.s)-1 {
				c.pos++
				return acts, stepping, true, nil
			}
			return nil, false, false, fmt.Errorf("%w: stray '-' in actions %q", errSyntax, s)
		default:
			return nil, false, false, fmt.Errorf("%w: unknown action %q", errSyntax, c.peek())
		}
		a.Text = c.s[start:c.pos]
		acts = append(acts, a)
	}
	return acts, stepping, false, nil
}
