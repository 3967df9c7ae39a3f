package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf16"

	"github.com/urfave/cli/v2"

	"github.com/smppproxy/smppproxy/internal/peer/esme"
	"github.com/smppproxy/smppproxy/smpp"
)

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:  "send",
		Usage: "send one submit_sm with an idempotency key and print the answer (and, with --wait-receipt, its receipt)",
		Description: "Binds to --target as an ESME (transmitter; transceiver with --wait-receipt), sends one submit_sm\n" +
			"carrying --key in the key TLV, prints the status and message id, and unbinds. Sending the same\n" +
			"--key and content again through the proxy shows a replay: the same message id, no second SMS\n" +
			"(the same content includes asking for a receipt: --dlr or --wait-receipt both times, else the\n" +
			"proxy answers SMPPPROXY_KEY_CONFLICT).\n" +
			"Text that is not ASCII is sent as UCS-2 (data_coding 8). Exit status 1 when the submit is refused.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "target", Value: "127.0.0.1:2775", Usage: "the proxy's (or an SMSC's) SMPP `HOST:PORT`"},
			&cli.StringFlag{Name: "system-id", Required: true, Usage: "bind system_id (the account)"},
			&cli.StringFlag{Name: "password", Usage: "bind password (visible in the process list: use a test account)"},
			&cli.StringFlag{Name: "key", Usage: "idempotency `KEY` sent in the key TLV; empty = none"},
			&cli.StringFlag{Name: "key-tag", Value: "0x1400", Usage: "TLV tag of the key (hex or decimal)"},
			&cli.StringFlag{Name: "from", Required: true, Usage: "source address (letters make it alphanumeric, TON 5)"},
			&cli.StringFlag{Name: "to", Required: true, Usage: "destination number (international, TON 1 NPI 1)"},
			&cli.StringFlag{Name: "text", Required: true, Usage: "message text"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "how long to wait for the bind and for the answer"},
			&cli.BoolFlag{Name: "dlr", Usage: "ask for a delivery receipt (registered_delivery 1) without waiting for it"},
			&cli.DurationFlag{Name: "wait-receipt", Usage: "ask for a delivery receipt and wait this `DURATION` for it (bind as transceiver)"},
		},
		Action: sendAction,
	}
}

func sendAction(c *cli.Context) error {
	tag, err := strconv.ParseUint(c.String("key-tag"), 0, 16)
	if err != nil {
		return fmt.Errorf("send: --key-tag %q: want a 16-bit tag such as 0x1400", c.String("key-tag"))
	}
	wait := c.Duration("wait-receipt")
	bind := smpp.BindTransmitter
	if wait > 0 {
		bind = smpp.BindTransceiver
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	cl, err := esme.Dial(ctx, c.String("target"), esme.Options{SystemID: c.String("system-id"), Password: c.String("password"), Bind: bind, Timeout: c.Duration("timeout")})
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	defer cl.Close()
	sub := sendSubmit(c.String("from"), c.String("to"), c.String("text"))
	sub.Key, sub.KeyTag = c.String("key"), uint16(tag)
	if wait > 0 || c.Bool("dlr") {
		sub.RegisteredDelivery = 1
	}
	start := time.Now()
	r, err := cl.Submit(ctx, sub)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "status      %s (0x%08X)\n", r.Status.String(), uint32(r.Status))
	fmt.Fprintf(w, "message id  %s\n", dash(r.MessageID))
	if r.Status != smpp.StatusOK {
		unbind(cl)
		return fmt.Errorf("send: submit refused: %s", r.Status.String())
	}
	if wait > 0 {
		d, err := awaitReceipt(c.Context, cl, r.MessageID, wait)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "receipt     stat %s, message_state %d, after %v\n", dash(d.Stat), d.MessageState, time.Since(start).Round(time.Millisecond))
	}
	unbind(cl)
	return nil
}

// sendSubmit is the submit_sm of send: an alphanumeric source when from
// has letters, text as UCS-2 when it is not ASCII.
func sendSubmit(from, to, text string) esme.Submit {
	s := esme.Submit{Src: from, SrcTON: 1, SrcNPI: 1, Dst: to, DstTON: 1, DstNPI: 1, Text: []byte(text)}
	for _, r := range from {
		if unicode.IsLetter(r) {
			s.SrcTON, s.SrcNPI = 5, 0
			break
		}
	}
	for _, r := range text {
		if r > unicode.MaxASCII {
			u := utf16.Encode([]rune(text))
			b := make([]byte, 2*len(u))
			for i, x := range u {
				binary.BigEndian.PutUint16(b[2*i:], x)
			}
			s.Text, s.DataCoding = b, 8
			break
		}
	}
	return s
}

// awaitReceipt waits up to wait for the receipt naming id (MO messages
// and other receipts are skipped).
func awaitReceipt(ctx context.Context, cl *esme.Client, id string, wait time.Duration) (esme.Deliver, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case d := <-cl.Receipts():
			if d.IsReceipt() && d.ReceiptedID == id {
				return d, nil
			}
		case <-cl.Done():
			return esme.Deliver{}, fmt.Errorf("send: connection lost while waiting for the receipt: %w", cl.Err())
		case <-t.C:
			return esme.Deliver{}, fmt.Errorf("send: no receipt for message id %s within %v", id, wait)
		case <-ctx.Done():
			return esme.Deliver{}, errors.New("send: interrupted while waiting for the receipt")
		}
	}
}

func unbind(cl *esme.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = cl.Unbind(ctx)
}
