package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/ova/archive"
	"github.com/harmonykaas/harmony/ova/ovf"
)

// ovaSummary is what `ova inspect` prints.
type ovaSummary struct {
	File       string            `json:"file"`
	Manifest   string            `json:"manifest"`
	Descriptor *ovf.Descriptor   `json:"descriptor"`
	Versions   map[string]string `json:"componentVersions"`
}

// versionPrefix marks the fixed properties that record component versions.
const versionPrefix = "harmony.version."

func ovaInspectCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Print an OVA's hardware, disks, properties and component versions",
		Long: `Print what an OVA describes, from its descriptor and manifest, without
reading the disks (seekable files are skipped over). It checks nothing
beyond parsing: use "ova validate" for that.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFlag(output, "text", "json"); err != nil {
				return err
			}
			s, err := inspectOVA(args[0])
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), s)
			}
			return printOVA(cmd.OutOrStdout(), s)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

func inspectOVA(path string) (*ovaSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := &ovaSummary{File: path, Versions: map[string]string{}}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		switch {
		case strings.HasSuffix(hdr.Name, ".ovf") && s.Descriptor == nil:
			data, err := io.ReadAll(io.LimitReader(tr, 4<<20))
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, hdr.Name, err)
			}
			if s.Descriptor, err = ovf.Parse(data); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, hdr.Name, err)
			}
		case strings.HasSuffix(hdr.Name, ".mf") && s.Manifest == "":
			data, err := io.ReadAll(io.LimitReader(tr, 1<<20))
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, hdr.Name, err)
			}
			h, _, err := archive.ParseManifest(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, hdr.Name, err)
			}
			s.Manifest = h.String()
		}
	}
	if s.Descriptor == nil {
		return nil, errors.New(path + ": no .ovf descriptor")
	}
	for _, p := range s.Descriptor.Properties {
		if name, ok := strings.CutPrefix(p.Key, versionPrefix); ok && !p.UserConfigurable {
			s.Versions[name] = p.Default
		}
	}
	return s, nil
}

func printOVA(w io.Writer, s *ovaSummary) error {
	d := s.Descriptor
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	hw := d.HardwareVersion
	if hw == 0 {
		hw = ovf.DefaultHardwareVersion
	}
	fmt.Fprintf(tw, "name:\t%s\n", d.Name)
	if d.Product.Product != "" {
		fmt.Fprintf(tw, "product:\t%s %s (%s)\n", d.Product.Product, d.Product.Version, d.Product.Vendor)
	}
	// The parser accepts only EFI, a pvscsi controller, one vmxnet3 NIC and
	// the guestInfo transport, so these are facts of any descriptor it read.
	fmt.Fprintf(tw, "hardware:\tvmx-%d, EFI firmware, %d CPUs, %d MiB, pvscsi, vmxnet3 on network %q, guest %s\n",
		hw, d.CPUs, d.MemoryMiB, d.Network, d.OSType)
	fmt.Fprintf(tw, "OVF environment:\tcom.vmware.guestInfo\n")
	fmt.Fprintf(tw, "manifest:\t%s\n", s.Manifest)
	fmt.Fprintf(tw, "\ndisks:\nID\tFILE\tCAPACITY\tPOPULATED\tFILE SIZE\n")
	for _, k := range d.Disks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.File, mib(k.Capacity), mib(k.PopulatedSize), mib(k.FileSize))
	}
	fmt.Fprintf(tw, "\nproperties:\nKEY\tTYPE\tSET BY\tLABEL\tDEFAULT\n")
	for _, p := range d.Properties {
		who := "fixed"
		if p.UserConfigurable {
			who = "user"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Key, p.Type, who, p.Label, p.Default)
	}
	fmt.Fprintf(tw, "\ncomponent versions:\n")
	for _, p := range d.Properties {
		if name, ok := strings.CutPrefix(p.Key, versionPrefix); ok && !p.UserConfigurable {
			fmt.Fprintf(tw, "%s\t%s\n", name, p.Default)
		}
	}
	return tw.Flush()
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
