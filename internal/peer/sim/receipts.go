package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppserver"
)

// message is what the simulator keeps of an accepted submit that asked
// for a receipt, to send receipts for it later.
type message struct {
	srcTON, srcNPI byte
	src            string
	dstTON, dstNPI byte
	dst            string
	account        string // system_id of the client that submitted it
	submitted      time.Time
	// head is the first 20 octets of the user data, which SMSCs echo in the
	// receipt's text: field (as real ones do: it often holds the OTP).
	head []byte
}

func newMessage(sub *smpp.Submit, account string) message {
	return message{
		srcTON: sub.SrcTON, srcNPI: sub.SrcNPI, src: string(sub.SrcAddr),
		dstTON: sub.DstTON, dstNPI: sub.DstNPI, dst: string(sub.DstAddr),
		account: account, submitted: time.Now(),
		head: append([]byte(nil), sub.UserData()[:min(20, len(sub.UserData()))]...),
	}
}

// ErrUnknownMessage: SendReceipt for an id the simulator did not issue to
// a submit that asked for a receipt.
var ErrUnknownMessage = errors.New("sim: no such message")

// autoReceipt schedules the DLRDelay receipt of an accepted submit.
func (s *Simulator) autoReceipt(sub *smpp.Submit, id string) {
	if s.cfg.DLRDelay <= 0 || sub.RegisteredDelivery&0x01 == 0 {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-time.After(s.cfg.DLRDelay):
		case <-s.closed:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(s.cfg.ReceiptRetry, time.Second))
		defer cancel()
		_, _ = s.SendReceipt(ctx, id, "DELIVRD")
	}()
}

// ReceiptID is how the simulator writes message id respID (as issued in a
// submit_sm_resp) in its receipts (Config.ReceiptIDs).
func (s *Simulator) ReceiptID(respID string) string {
	base := 10
	if s.cfg.HexIDs {
		base = 16
	}
	n, err := strconv.ParseUint(respID, base, 64)
	if err != nil {
		return respID
	}
	switch s.cfg.ReceiptIDs {
	case "hex":
		return strconv.FormatUint(n, 16)
	case "dec":
		return strconv.FormatUint(n, 10)
	}
	return respID
}

// SendReceipt sends a receipt with stat (DELIVRD, UNDELIV, ENROUTE, …) for
// message id (as given in the submit_sm_resp) to a receiving session of the
// client that submitted it, and sends it again every 100ms until the
// client answers status 0, ctx ends or ReceiptRetry passes. It returns the
// last status answered.
func (s *Simulator) SendReceipt(ctx context.Context, id, stat string) (smpp.Status, error) {
	s.mu.Lock()
	m, ok := s.messages[id]
	s.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownMessage, id)
	}
	body := receiptBody(m, s.ReceiptID(id), stat, !s.cfg.ReceiptTextOnly)
	return s.deliver(ctx, m.account, smpp.CmdDeliverSM, body)
}

// SendMO sends a mobile-originated deliver_sm (esm_class 0) from src to dst
// to a receiving session of the client bound as account ("" = any) and
// retries like SendReceipt.
func (s *Simulator) SendMO(ctx context.Context, account, src, dst string, text []byte) (smpp.Status, error) {
	if len(text) > 254 {
		return 0, fmt.Errorf("sim: MO text of %d octets", len(text))
	}
	b := []byte{0, 1, 1}
	b = append(append(b, src...), 0, 0, 0)
	b = append(append(b, dst...), 0)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(len(text)))
	b = append(b, text...)
	return s.deliver(ctx, account, smpp.CmdDeliverSM, b)
}

// Receipts returns how many receipts and MO were sent (attempts) and how
// many of them the client accepted with status 0.
func (s *Simulator) Receipts() (attempts, accepted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dlrTries, s.dlrOK
}

// deliver sends a request to a receiving session of account (round-robin)
// until one answers status 0.
func (s *Simulator) deliver(ctx context.Context, account string, cmd uint32, body []byte) (smpp.Status, error) {
	var deadline <-chan time.Time
	if s.cfg.ReceiptRetry > 0 {
		t := time.NewTimer(s.cfg.ReceiptRetry)
		defer t.Stop()
		deadline = t.C
	}
	last, lastErr := smpp.Status(0), error(nil)
	for {
		st, err := s.deliverOnce(ctx, account, cmd, body)
		if err == nil && st == smpp.StatusOK {
			return st, nil
		}
		last, lastErr = st, err
		if s.cfg.ReceiptRetry < 0 {
			return last, lastErr
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return last, errors.Join(lastErr, ctx.Err())
		case <-deadline:
			return last, errors.Join(lastErr, errors.New("sim: receipt retry time over"))
		case <-s.closed:
			return last, errors.New("sim: closed")
		}
	}
}

// errNoReceiver: no receiving session of the account is bound.
var errNoReceiver = errors.New("sim: no receiving session bound")

func (s *Simulator) deliverOnce(ctx context.Context, account string, cmd uint32, body []byte) (smpp.Status, error) {
	var rx []*smppserver.Session
	for _, ss := range s.srv.Sessions() {
		if p := ss.Principal(); p != nil && (account == "" || p.Account == account) && ss.BindType().CanReceive() {
			rx = append(rx, ss)
		}
	}
	if len(rx) == 0 {
		return 0, errNoReceiver
	}
	s.mu.Lock()
	s.rr++
	target := rx[s.rr%len(rx)]
	s.dlrTries++
	s.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := target.Request(rctx, cmd, body)
	if err != nil {
		return 0, err
	}
	st := smpp.ParseHeader(resp).Status
	if st == smpp.StatusOK {
		s.mu.Lock()
		s.dlrOK++
		if len(s.sent) == maxSent {
			s.sent = s.sent[1:]
		}
		s.sent = append(s.sent, body)
		s.mu.Unlock()
	}
	return st, nil
}

// maxSent bounds the bodies kept for Sent.
const maxSent = 1000

// Sent returns the bodies of the last 1000 receipts and MO the client
// accepted, oldest first.
func (s *Simulator) Sent() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.sent...)
}

// stateOf maps a receipt stat to the message_state TLV value.
var stateOf = map[string]byte{
	"ENROUTE": 1, "DELIVRD": 2, "EXPIRED": 3, "DELETED": 4, "UNDELIV": 5,
	"ACCEPTD": 6, "UNKNOWN": 7, "REJECTD": 8, "SKIPPED": 9,
}

// ReceiptBody builds a deliver_sm body carrying a delivery receipt for sub
// (addresses swapped, esm_class 0x04, receipted_message_id and message_state
// TLVs, and the conventional receipt text).
func ReceiptBody(sub *smpp.Submit, id, stat string) []byte {
	return receiptBody(newMessage(sub, ""), id, stat, true)
}

func receiptBody(m message, id, stat string, tlvs bool) []byte {
	sub := m.submitted.Format("0601021504")
	done := time.Now().Format("0601021504")
	text := fmt.Sprintf("id:%s sub:001 dlvrd:001 submit date:%s done date:%s stat:%s err:000 text:", id, sub, done, stat)
	text += string(m.head)
	esm := byte(0x04)
	if stat == "ENROUTE" || stat == "ACCEPTD" {
		esm = 0x20 // intermediate notification
	}
	b := []byte{0} // service_type
	b = append(b, m.dstTON, m.dstNPI)
	b = append(append(b, m.dst...), 0)
	b = append(b, m.srcTON, m.srcNPI)
	b = append(append(b, m.src...), 0)
	b = append(b, esm, 0, 0, 0, 0, 0, 0, 0, 0) // esm_class, pid, prio, sched "", validity "", reg, replace, dc, default id
	b = append(b, byte(len(text)))
	b = append(b, text...)
	if tlvs {
		b = append(b, 0x00, 0x1E, 0, byte(len(id)+1))
		b = append(append(b, id...), 0)
		st, ok := stateOf[stat]
		if !ok {
			st = 7
		}
		b = append(b, 0x04, 0x27, 0, 1, st)
	}
	return b
}

// query answers query_sm (message_state ENROUTE) and cancel_sm (status 0)
// for a message id the simulator issued to a submit that asked for a
// receipt, ESME_RINVMSGID for any other id. It records the ids asked for.
func (s *Simulator) query(w smppserver.ResponseWriter, r *smppserver.Request) {
	body := r.Frame[smpp.HeaderLen:]
	if r.Header.ID == smpp.CmdCancelSM { // service_type first
		i := bytes.IndexByte(body, 0)
		if i < 0 {
			_ = w.WriteStatus(smpp.StatusInvCmdLen)
			return
		}
		body = body[i+1:]
	}
	i := bytes.IndexByte(body, 0)
	if i < 0 {
		_ = w.WriteStatus(smpp.StatusInvCmdLen)
		return
	}
	id := string(body[:i])
	s.mu.Lock()
	_, ok := s.messages[id]
	s.queried = append(s.queried, id)
	s.mu.Unlock()
	if !ok {
		_ = w.WriteStatus(smpp.StatusInvMsgID)
		return
	}
	if r.Header.ID == smpp.CmdCancelSM {
		_ = w.WriteStatus(smpp.StatusOK)
		return
	}
	resp := append([]byte(id), 0, 0, 1, 0) // message_id, final_date "", ENROUTE, error_code
	_ = w.WriteFrame(smpp.EncodeSimple(smpp.CmdQuerySM|smpp.RespBit, smpp.StatusOK, r.Header.Sequence, resp))
}

// Queried returns the message ids of every query_sm and cancel_sm received.
func (s *Simulator) Queried() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.queried...)
}
