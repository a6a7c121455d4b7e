// refcheck: the reference implementations (golang.org/x/mod/sumdb/note and sumdb/tlog, as Debian packages
// them) reading what the ledger writes. tests/audit/test_go_reference.py builds and runs it.
//
//	refcheck note  VKEY NOTE        open a signed note with the public key; print its text
//	refcheck proof VKEY PROOF.json  check a `ledger prove` inclusion proof against its signed head
//	refcheck tree  TREE.json        check a consistency proof {old_size, old_root, new_size, new_root, proof} (hex)
//
// Exit 0 when the reference accepts, 1 (with its error on stderr) when it refuses, 2 on a usage error.
package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func read(path string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return data
}

func open(vkey string, msg []byte) string {
	verifier, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		fail("key: %v", err)
	}
	opened, err := note.Open(msg, note.VerifierList(verifier))
	if err != nil {
		fail("note: %v", err)
	}
	return opened.Text
}

// checkpoint parses a C2SP tlog-checkpoint body: origin, decimal size, base64 root, optional extension lines.
func checkpoint(text string) (int64, tlog.Hash) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 || lines[0] == "" {
		fail("checkpoint: fewer than three lines")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 {
		fail("checkpoint: bad size %q", lines[1])
	}
	raw, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(raw) != tlog.HashSize {
		fail("checkpoint: bad root %q", lines[2])
	}
	var root tlog.Hash
	copy(root[:], raw)
	return size, root
}

func hash(text string) tlog.Hash {
	raw, err := hex.DecodeString(text)
	if err != nil || len(raw) != tlog.HashSize {
		fail("not a hex hash: %q", text)
	}
	var h tlog.Hash
	copy(h[:], raw)
	return h
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: refcheck note VKEY NOTE | proof VKEY PROOF.json | tree TREE.json")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "note":
		fmt.Print(open(string(read(os.Args[2])), read(os.Args[3])))
	case "proof":
		var proof struct {
			Payload    string   `json:"payload"`
			LeafIndex  int64    `json:"leaf_index"`
			TreeSize   int64    `json:"tree_size"`
			AuditPath  []string `json:"audit_path"`
			SignedHead string   `json:"signed_head"`
		}
		if err := json.Unmarshal(read(os.Args[3]), &proof); err != nil {
			fail("proof: %v", err)
		}
		size, root := checkpoint(open(string(read(os.Args[2])), []byte(proof.SignedHead)))
		if size != proof.TreeSize {
			fail("proof: tree size %d, signed head %d", proof.TreeSize, size)
		}
		path := make(tlog.RecordProof, len(proof.AuditPath))
		for i, node := range proof.AuditPath {
			path[i] = hash(node)
		}
		if err := tlog.CheckRecord(path, size, root, proof.LeafIndex, tlog.RecordHash([]byte(proof.Payload))); err != nil {
			fail("proof: %v", err)
		}
		fmt.Printf("entry %d included in %d\n", proof.LeafIndex, size)
	case "tree":
		var tree struct {
			OldSize int64    `json:"old_size"`
			OldRoot string   `json:"old_root"`
			NewSize int64    `json:"new_size"`
			NewRoot string   `json:"new_root"`
			Proof   []string `json:"proof"`
		}
		if err := json.Unmarshal(read(os.Args[2]), &tree); err != nil {
			fail("tree: %v", err)
		}
		path := make(tlog.TreeProof, len(tree.Proof))
		for i, node := range tree.Proof {
			path[i] = hash(node)
		}
		if err := tlog.CheckTree(path, tree.NewSize, hash(tree.NewRoot), tree.OldSize, hash(tree.OldRoot)); err != nil {
			fail("tree: %v", err)
		}
		fmt.Printf("%d extends %d\n", tree.NewSize, tree.OldSize)
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}
