// Package view holds the objects of the API contract as clients see them
// (the public API's Escrow, Category and pagination objects) and their
// rendering from domain state. The API, the read models and the webhooks
// show the same objects, so none of them owns the rendering: each imports
// this package, which imports only domain packages.
package view
