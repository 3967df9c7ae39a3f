package smppclient

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/linxGnu/gosmpp/pdu"

	"github.com/smppproxy/smppproxy/smpp"
)

// send queues a control frame; false if the session is closed.
func (s *session) send(frame []byte, after CloseReason) bool {
	if len(frame) >= smpp.HeaderLen { // (nil: a marker that closes the session)
		if h := smpp.ParseHeader(frame); h.IsResponse() {
			s.noteResponse(h.Sequence)
		}
	}
	select {
	case s.writeq <- &writeReq{frame: frame, after: after}:
		return true
	case <-s.dead:
		return false
	}
}

// readBufSize is the size of a session's read buffer.
const readBufSize = 16 << 10

// writeBufSize is the size past which the writer stops gathering queued
// frames and writes what it has.
const writeBufSize = 32 << 10

// batch is the writer's reusable buffer: the frames of one socket write
// and the requests they came from.
type batch struct {
	buf  []byte
	reqs []*writeReq
}

// writeLoop owns every write to the socket. It writes every frame queued
// at the time with one Write (see writeBatch), and sends enquire_link when
// nothing was received for EnquireLink.
func (s *session) writeLoop() {
	defer s.wg.Done()
	defer close(s.writerDone)
	defer s.drainQueue()
	el := s.p.cfg.EnquireLink
	t := time.NewTimer(el)
	defer t.Stop()
	b := &batch{buf: make([]byte, 0, writeBufSize)}
	for {
		select {
		case <-s.dead:
			return
		case req := <-s.writeq:
			if !s.writeBatch(b, req) {
				return
			}
		case <-t.C:
			idle := time.Since(time.Unix(0, s.lastRecv.Load()))
			if idle < el {
				t.Reset(el - idle)
				continue
			}
			s.mu.Lock()
			seq := s.nextSeqLocked()
			s.mu.Unlock()
			if !s.writeBatch(b, &writeReq{frame: smpp.EncodeSimple(smpp.CmdEnquireLink, smpp.StatusOK, seq, nil)}) {
				return
			}
			s.p.stats.enquireLinks.Add(1)
			t.Reset(el)
		}
	}
}

// writeBatch writes first and every frame queued behind it with a single
// Write: it gathers until the queue is empty (after yielding once, so that
// the goroutines about to queue a frame can), the buffer holds
// writeBufSize bytes, or a frame closes the session after it (what is
// queued behind such a frame is never written). Each request learns the
// outcome of the Write that carried it (see flush). false: the session is
// closing.
func (s *session) writeBatch(b *batch, first *writeReq) bool {
	b.buf, b.reqs = b.buf[:0], b.reqs[:0]
	yielded := false
	for req := first; ; {
		s.gather(b, req)
		if req.after != ReasonNone || len(b.buf) >= writeBufSize {
			break
		}
		select {
		case req = <-s.writeq:
			continue
		default:
		}
		if yielded {
			break
		}
		yielded = true
		runtime.Gosched()
		select {
		case req = <-s.writeq:
			continue
		default:
		}
		break
	}
	return s.flush(b)
}

// gather adds req to the batch, or tells it at once that it was not
// written when its context ended while it was queued (nothing of it has
// reached the socket).
func (s *session) gather(b *batch, req *writeReq) {
	if req.ctx != nil {
		if err := req.ctx.Err(); err != nil {
			req.done <- writeResult{err: err}
			return // (only control frames, which have no ctx, close the session after them)
		}
	}
	if req.pd != nil && s.unbinding() {
		// Unbinding: the SMSC would refuse the request, or leave it
		// unanswered. Not a byte of it was written.
		req.done <- writeResult{err: errSessionClosed}
		return
	}
	b.buf = append(b.buf, req.frame...)
	b.reqs = append(b.reqs, req)
}

// flush writes the batch with one Write and reports to each request of it.
// A Write that fails having written n bytes leaves maybe written (n > 0 in
// its result: ambiguous) the requests whose frame begins within those n
// bytes, and none of those behind them (n == 0: not sent): over TCP the
// kernel never had their bytes, and over TLS n counts only whole records,
// so what follows n is at most in a record the peer cannot decrypt.
// false: the session is closing.
func (s *session) flush(b *batch) bool {
	var n int
	var err error
	if len(b.buf) > 0 {
		if BeforeWrite != nil {
			BeforeWrite(b.buf, waiting(b.reqs))
		}
		for _, req := range b.reqs {
			if req.pd != nil {
				req.pd.written.Store(true)
			}
		}
		_ = s.conn.SetWriteDeadline(time.Now().Add(s.p.cfg.ResponseTimeout))
		n, err = s.conn.Write(b.buf)
	}
	// Counted before any request hears of its write: its response may
	// come, and its caller read the counters, before this loop ends.
	if err == nil {
		written := uint64(waiting(b.reqs))
		s.submits.Add(written)
		s.p.stats.written.Add(written)
	}
	var after CloseReason
	off := 0 // where req's frame begins in b.buf
	for _, req := range b.reqs {
		if req.done != nil {
			req.done <- writeResult{n: min(max(n-off, 0), len(req.frame)), err: err}
		}
		off += len(req.frame)
		after = req.after
	}
	if cap(b.buf) > 4*writeBufSize { // a large PDU went out: do not keep its buffer
		b.buf = make([]byte, 0, writeBufSize)
	}
	clear(b.reqs) // no reference to a request kept past its write
	if err != nil {
		s.close(ReasonWriteError, err)
		return false
	}
	if after != ReasonNone {
		s.close(after, nil)
		return false
	}
	return true
}

// drainQueue tells every queued request that it was not written.
func (s *session) drainQueue() {
	for {
		select {
		case req := <-s.writeq:
			if req.done != nil {
				req.done <- writeResult{err: errSessionClosed}
			}
		default:
			return
		}
	}
}

func (s *session) readLoop() {
	defer s.wg.Done()
	idle := 3 * s.p.cfg.EnquireLink
	// Through gosmpp's connection, which may hold bytes read past the
	// bind_resp; the buffer lets ReadFrame read headers in place.
	br := bufio.NewReaderSize(s.conn, readBufSize)
	for {
		if !smpp.FrameBuffered(br) { // else no read: no deadline to move
			_ = s.conn.SetReadDeadline(time.Now().Add(idle))
		}
		frame, err := smpp.ReadFrame(br, s.p.cfg.MaxPDUSize)
		if err != nil {
			s.close(readReason(err), err)
			return
		}
		s.lastRecv.Store(time.Now().UnixNano())
		h := smpp.ParseHeader(frame)
		if h.IsResponse() {
			s.onResponse(h, frame)
		} else {
			s.onRequest(h, frame)
		}
	}
}

func readReason(err error) CloseReason {
	var ne net.Error
	switch {
	case errors.Is(err, smpp.ErrBadLength):
		return ReasonProtocolError
	case errors.As(err, &ne) && ne.Timeout():
		return ReasonIdleTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ReasonPeerClosed
	}
	return ReasonReadError
}

func (s *session) onResponse(h smpp.Header, frame []byte) {
	switch h.ID {
	case smpp.CmdEnquireLink | smpp.RespBit:
		return
	case smpp.CmdUnbind | smpp.RespBit:
		s.unboundOnce.Do(func() { close(s.unbound) })
		return
	}
	r := Response{Status: h.Status, Frame: frame, Session: s.id, Sequence: h.Sequence}
	s.mu.Lock()
	pd, ok := s.pending[h.Sequence]
	if ok && !pd.written.Load() {
		s.mu.Unlock()
		// The request's frame has not been written: whatever this is, it
		// is not its answer (taken, a temporary error would send it again).
		s.p.stats.lateResponses.Add(1)
		s.p.warnPDU(s.log, "unwritten_response", "response for a request not written yet dropped", "seq", h.Sequence, "command", fmt.Sprintf("0x%08X", h.ID))
		return
	}
	if ok && !answers(h.ID, pd.cmd.Load()) {
		s.mu.Unlock()
		// Not this request's response: the request goes on waiting for
		// its own (or its timeout).
		s.p.warnPDU(s.log, "mismatched_response", "response of another command than the request dropped", "seq", h.Sequence, "command", fmt.Sprintf("0x%08X", h.ID), "request", fmt.Sprintf("0x%08X", pd.cmd.Load()))
		return
	}
	delete(s.pending, h.Sequence)
	s.kickAnswered()
	s.mu.Unlock()
	var err error
	switch {
	case h.ID == smpp.CmdGenericNack && (h.Status == smpp.StatusOK || h.Status == smpp.StatusSysErr && s.respondedLately(h.Sequence)):
		// Status 0 is neither an acceptance nor a refusal; a nack
		// 0x08 numbered as a response sent lately may be the SMSC's
		// nack of that response. Either way the outcome is unknown:
		// taken for a refusal, a temporary error would send the message
		// again (from review). The other temporary statuses (0x14,
		// 0x58, 0x64) speak of the SMSC's load, which no response
		// causes: they answer the submit, however numbered (on a
		// transceiver bind the SMSC's numbers and ours often run in
		// step, exactly while it throttles).
		s.p.warnPDU(s.log, "unclear_nack", "generic_nack that may not answer the request: outcome unknown", "seq", h.Sequence, "status", h.Status)
		err = ErrUnclearAnswer
	case h.Status == smpp.StatusOK:
		r.MessageID = messageID(frame)
	}
	if len(r.MessageID) > MaxMessageIDLen {
		// Accepted, but with an id no SMPP version allows and no store
		// index could hold: the request reached the SMSC, so its outcome
		// is unknown, and the id is dropped.
		s.p.warnPDU(s.log, "overlong_message_id", "acceptance with an overlong message id: outcome unknown", "seq", h.Sequence, "command", fmt.Sprintf("0x%08X", h.ID), "id_octets", len(r.MessageID), "max", MaxMessageIDLen)
		r.MessageID, err = "", ErrBadAnswer
	}
	if !ok {
		s.p.stats.lateResponses.Add(1)
		s.p.warnPDU(s.log, "late_response", "late or unmatched response dropped", "seq", h.Sequence, "command", fmt.Sprintf("0x%08X", h.ID), "status", h.Status)
		if f := s.p.cfg.OnLateResponse; f != nil && err == nil {
			f(s.id, h.Sequence, r)
		}
		return
	}
	s.p.stats.responses.Add(1)
	s.p.noteStatus(s, h.Status == smpp.StatusThrottled)
	s.log.Debug("response", "seq", h.Sequence, "status", h.Status)
	pd.ch <- result{resp: r, err: err}
}

// respSlots is how many of the latest response sequence numbers a
// session remembers (respondedLately): the SMSC's requests are numbered
// in a row, and their answers are written within its window.
const respSlots = 1024

// noteResponse remembers that a response numbered seq is being sent now.
func (s *session) noteResponse(seq uint32) {
	s.respSent[seq%respSlots].Store(uint64(seq)<<32 | uint64(uint32(time.Now().Unix())))
}

// respondedLately reports whether a response numbered seq was sent within
// response_timeout (and a second): a generic_nack numbered so may be the
// SMSC's nack of it.
func (s *session) respondedLately(seq uint32) bool {
	v := s.respSent[seq%respSlots].Load()
	if v == 0 || uint32(v>>32) != seq {
		return false
	}
	age := time.Duration(uint32(time.Now().Unix())-uint32(v)) * time.Second
	return age <= s.p.cfg.ResponseTimeout+time.Second
}

// answers reports whether a response of command resp answers a request of
// command req: its own response, or a generic_nack (the peer could not
// take it). A request whose command is not known yet (0) takes any.
func answers(resp, req uint32) bool {
	return req == 0 || resp == req|smpp.RespBit || resp == smpp.CmdGenericNack
}

// messageID returns the message_id of a submit_sm_resp, data_sm_resp or
// query_sm_resp, "" for anything else or an undecodable query_sm_resp. The
// usual submit_sm_resp and data_sm_resp, a body that is just the C-Octet
// string, is read directly; anything else is decoded by gosmpp
// (decodeMessageID), which gives the same answer for those (FuzzMessageID
// checks it). A submit_sm_resp or data_sm_resp gosmpp cannot decode (a
// second NUL, no NUL, TLVs cut short) gives the string its body begins
// with, up to a NUL or its end: the SMSC accepted the message under that
// id, and an empty one would leave its receipts unmatched.
func messageID(frame []byte) string {
	switch smpp.ParseHeader(frame).ID {
	case smpp.CmdSubmitSM | smpp.RespBit, smpp.CmdDataSM | smpp.RespBit:
		body := frame[smpp.HeaderLen:]
		i := bytes.IndexByte(body, 0)
		if i >= 0 && i == len(body)-1 {
			return string(body[:i])
		}
		if id := decodeMessageID(frame); id != "" {
			return id
		}
		if i < 0 {
			i = len(body)
		}
		return string(body[:i])
	case smpp.CmdQuerySM | smpp.RespBit:
		return decodeMessageID(frame)
	}
	return ""
}

// decodeMessageID is messageID by gosmpp's decoder.
func decodeMessageID(frame []byte) string {
	p, err := smpp.Decode(frame)
	if err != nil {
		return ""
	}
	switch r := p.(type) {
	case *pdu.SubmitSMResp:
		return r.MessageID
	case *pdu.DataSMResp:
		return r.MessageID
	case *pdu.QuerySMResp:
		return r.MessageID
	}
	return ""
}

func (s *session) onRequest(h smpp.Header, frame []byte) {
	switch h.ID {
	case smpp.CmdEnquireLink:
		s.send(smpp.EncodeSimple(smpp.CmdEnquireLink|smpp.RespBit, smpp.StatusOK, h.Sequence, nil), ReasonNone)
	case smpp.CmdUnbind:
		s.ending.CompareAndSwap(int32(ReasonNone), int32(ReasonPeerUnbind))
		if !s.peerUnbound.CompareAndSwap(false, true) {
			// The first unbind's answer closes the session: a repeat
			// starts nothing (from review: each started a goroutine
			// that lived until the deliveries ended, for 16 bytes of
			// the SMSC's each, and any of them could be the one
			// answered).
			return
		}
		resp := smpp.EncodeSimple(smpp.CmdUnbind|smpp.RespBit, smpp.StatusOK, h.Sequence, nil)
		s.wg.Go(func() { s.answerPeerUnbind(resp) })
	case smpp.CmdDeliverSM, smpp.CmdDataSM:
		s.deliver(h, frame)
	case smpp.CmdAlertNotif: // has no response
		s.log.Debug("alert_notification ignored", "seq", h.Sequence)
	default:
		s.p.warnPDU(s.log, "unsupported", "unsupported request from upstream", "seq", h.Sequence, "command", fmt.Sprintf("0x%08X", h.ID))
		s.send(smpp.GenericNack(smpp.StatusInvCmdID, h.Sequence), ReasonNone)
	}
}

// answerPeerUnbind writes resp, the unbind_resp that closes the session,
// once the deliveries being stored are answered (new ones are refused
// meanwhile), or the SMSC would send them again after the next bind, and
// once the submits written have their answers (new ones go to other
// binds), which the SMSC may send after its unbind: the session's end
// made them unknown (from review). response_timeout bounds the wait.
func (s *session) answerPeerUnbind(resp []byte) {
	t := time.NewTimer(s.p.cfg.ResponseTimeout)
	defer t.Stop()
	drained := s.drainDeliveries()
	for drained != nil || !s.writtenAnswered() {
		select {
		case <-drained:
			drained = nil
		case <-s.answered:
		case <-s.dead:
			return
		case <-t.C:
			s.send(resp, ReasonPeerUnbind)
			return
		}
	}
	s.send(resp, ReasonPeerUnbind)
}

// deliver hands a deliver_sm/data_sm to OnDeliver in its own goroutine and
// answers with its status; beyond DeliverWindow calls running over the
// pool (or once the session shuts down) it answers 0x58.
func (s *session) deliver(h smpp.Header, frame []byte) {
	respID := h.ID | smpp.RespBit
	if !s.acquireDelivery() {
		s.p.stats.deliverRefused.Add(1)
		s.p.warnPDU(s.log, "deliver_refused", "delivery refused: deliver_window full", "seq", h.Sequence)
		s.send(smpp.EncodeSimple(respID, smpp.StatusThrottled, h.Sequence, []byte{0}), ReasonNone)
		return
	}
	s.p.stats.deliveries.Add(1)
	s.wg.Go(func() {
		st := s.callOnDeliver(frame)
		if s.ctx.Err() == nil {
			s.send(smpp.EncodeSimple(respID, st, h.Sequence, []byte{0}), ReasonNone)
		}
		// After the response is queued: shutdown relies on it.
		<-s.p.delivering
		<-s.deliverSem
	})
}

// drainDeliveries takes, once for the session, every delivery slot, so
// that the deliveries running queue their responses and no new one starts
// (they are refused, 0x58); the channel it returns is closed once it holds
// them all. Both ways a session ends politely wait on it (the SMSC's
// unbind and Pool.Close), each for as long as it may.
func (s *session) drainDeliveries() <-chan struct{} {
	s.drainOnce.Do(func() {
		// Not in s.wg: shutdown may call this on a session already closing,
		// whose wg is being waited for. It ends with the session.
		go func() {
			for range cap(s.deliverSem) {
				select {
				case s.deliverSem <- struct{}{}:
				case <-s.dead:
					return
				}
			}
			close(s.drained)
		}()
	})
	return s.drained
}

// acquireDelivery takes a delivery slot of the session and one of the
// pool, without waiting; false when either is full.
func (s *session) acquireDelivery() bool {
	select {
	case s.deliverSem <- struct{}{}:
	default:
		return false
	}
	select {
	case s.p.delivering <- struct{}{}:
		return true
	default:
		<-s.deliverSem
		return false
	}
}

func (s *session) callOnDeliver(frame []byte) (st smpp.Status) {
	f := s.p.cfg.OnDeliver
	if f == nil {
		return smpp.StatusOK
	}
	defer func() {
		if r := recover(); r != nil {
			s.p.stats.deliverPanics.Add(1)
			s.log.Error("OnDeliver panicked", "panic", r, "stack", string(debug.Stack()))
			st = smpp.StatusSysErr
		}
	}()
	return f(s.ctx, Delivery{Upstream: s.p.cfg.Name, Session: s.id, Frame: frame})
}
