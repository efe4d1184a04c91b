package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
)

// CheckFile checks a figure file as a reader would get it: a .png must
// decode and be at least 200×200 pixels, an .svg must be an XML document
// whose root is <svg> and that draws at least one path. It returns the
// file's extension (".png", ".svg") for callers that count them.
func CheckFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	ext := filepath.Ext(path)
	switch ext {
	case ".png":
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			return ext, fmt.Errorf("check figure %s: %w", path, err)
		}
		if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 200 {
			return ext, fmt.Errorf("check figure %s: %v: too small", path, b)
		}
	case ".svg":
		d := xml.NewDecoder(bytes.NewReader(data))
		root, paths := "", 0
		for {
			tok, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return ext, fmt.Errorf("check figure %s: not XML: %w", path, err)
			}
			if se, ok := tok.(xml.StartElement); ok {
				if root == "" {
					root = se.Name.Local
				}
				if se.Name.Local == "path" {
					paths++
				}
			}
		}
		if root != "svg" || paths == 0 {
			return ext, fmt.Errorf("check figure %s: root element %q, %d paths; want an svg with lines", path, root, paths)
		}
	default:
		return ext, fmt.Errorf("check figure %s: not a .png or .svg file", path)
	}
	return ext, nil
}
