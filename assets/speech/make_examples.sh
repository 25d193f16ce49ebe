#!/bin/sh
# The app's example clips for speech models, synthesized with espeak-ng (voice en, 22.05 kHz
# mono 16-bit WAV). Run from anywhere: sh assets/speech/make_examples.sh
set -e
cd "$(dirname "$0")"
espeak-ng -v en -s 150 -w hello_world.wav "Hello world, this is a test."
espeak-ng -v en -s 150 -w quick_brown_fox.wav "The quick brown fox jumps over the lazy dog."
espeak-ng -v en -s 140 -w weather_report.wav \
  "Good morning. Today will be sunny with a few clouds in the afternoon, and the evening will be cool and dry. Tomorrow brings light rain."
