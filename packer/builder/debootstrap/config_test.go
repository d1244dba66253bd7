package debootstrap

import (
	"strings"
	"testing"
)

func TestPrepareDefaultsAndRefusals(t *testing.T) {
	var b Builder
	if _, _, err := b.Prepare(map[string]any{"image_name": "harmony-node", "cache_dir": "/c", "output_dir": "/o", "source_date_epoch": "1700000000"}); err != nil {
		t.Fatal(err)
	}
	c := b.config
	if c.Suite != "bookworm" || c.Variant != "minbase" || c.diskBytes != 4<<30 || c.ESPSizeMiB != 128 || c.epoch != 1700000000 {
		t.Errorf("defaults: %+v", c)
	}
	for _, p := range bootPackages {
		if !contains(c.Include, p) {
			t.Errorf("include lacks %s, without which the disk cannot boot", p)
		}
	}
	for name, tc := range map[string]struct {
		cfg  map[string]any
		want string
	}{
		"no name":          {map[string]any{"cache_dir": "/c", "output_dir": "/o"}, "image_name"},
		"bad package":      {map[string]any{"include": []string{"rm -rf /"}}, `include[0] "rm -rf /"`},
		"bad size":         {map[string]any{"disk_size": "6G"}, `disk_size "6G"`},
		"tiny disk":        {map[string]any{"disk_size": "512MiB"}, "want 1GiB to 2048GiB"},
		"bad mirror":       {map[string]any{"mirror": "ftp://x"}, "mirror"},
		"bad variant":      {map[string]any{"variant": "fat"}, `variant "fat"`},
		"no epoch":         {map[string]any{"source_date_epoch": ""}, "source_date_epoch: required"},
		"two-line cmdline": {map[string]any{"kernel_args": "a\nb"}, "kernel_args"},
		"bad module":       {map[string]any{"initrd_modules": []string{"sd_mod", "../x"}}, `initrd_modules[1] "../x"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("SOURCE_DATE_EPOCH", "")
			cfg := map[string]any{"image_name": "x", "cache_dir": "/c", "output_dir": "/o", "source_date_epoch": "1"}
			for k, v := range tc.cfg {
				cfg[k] = v
			}
			if name == "no name" {
				delete(cfg, "image_name")
			}
			var b Builder
			_, _, err := b.Prepare(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestCacheKeyFollowsTheInputs(t *testing.T) {
	base := Config{Suite: "bookworm", Mirror: "http://m", SecurityMirror: "http://s", Variant: "minbase", Include: []string{"b", "a"}}
	same := base
	same.Include = []string{"a", "b", "a"}
	if cacheKey(&base) != cacheKey(&same) {
		t.Error("the package order or a duplicate changed the cache key")
	}
	other := base
	other.Include = []string{"a", "b", "c"}
	if cacheKey(&base) == cacheKey(&other) {
		t.Error("another package list gave the same cache key")
	}
	// The initrd is made in the base, so its modules are part of the key.
	listed := base
	listed.InitrdModules = []string{"virtio_blk"}
	if cacheKey(&base) == cacheKey(&listed) {
		t.Error("an initrd module list gave the key of Debian's default initrd")
	}
	more := listed
	more.InitrdModules = []string{"virtio_blk", "vmw_pvscsi"}
	if cacheKey(&listed) == cacheKey(&more) {
		t.Error("another initrd module list gave the same cache key")
	}
}
