package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/escrowd/escrowd/domain"
	"github.com/escrowd/escrowd/domain/category"
	"github.com/escrowd/escrowd/eventstore"
	"github.com/escrowd/escrowd/projections"
	"github.com/escrowd/escrowd/view"
)

// categoryRoutes: merchant-defined escrow categories. They belong to the
// merchant and environment, so customer-id is ignored and any key may
// read or write them.
func (s *Server) categoryRoutes() {
	pol := Policy{CID: CIDIgnored}
	s.handle(http.MethodPost, "/v1/escrow/category/create", pol, s.createCategory, true)
	s.handle(http.MethodPut, "/v1/escrow/category/edit/:id", pol, s.editCategory, true)
	s.handle(http.MethodPut, "/v1/escrow/category/position/:id", pol, s.moveCategory)
	s.handle(http.MethodGet, "/v1/escrow/category/get", pol, s.listCategories)
	s.handle(http.MethodGet, "/v1/escrow/category/get/:id", pol, s.getCategory)
	s.handle(http.MethodDelete, "/v1/escrow/category/delete/:id", pol, s.deleteCategory)
}

// ownCategory reads a live category of the caller's merchant and
// environment; anything else is 404 Category not found.
func (s *Server) ownCategory(c echo.Context, id string) (view.Category, error) {
	p, _ := PrincipalFrom(c)
	q, err := s.readModels(c, projections.CategoriesName)
	if err != nil {
		return view.Category{}, err
	}
	cat, ok, err := q.CategoryByID(c.Request().Context(), id)
	if err != nil {
		return cat, err
	}
	if !ok || cat.MerchantID != p.MerchantID || cat.Environment != string(p.Environment) {
		return cat, category.ErrNotFound
	}
	return cat, nil
}

// categoryInput reads create and edit: multipart (name, description, one
// image under imageUrl, category_position) or JSON with the same field
// names. Fields not sent are nil; the image's URL is
// nil when none was uploaded.
type categoryInput struct {
	Name, Description, ImageURL *string
	Position                    int // 0: not sent
}

func (s *Server) categoryInput(c echo.Context) (categoryInput, error) {
	var in categoryInput
	f, err := escrowFields(c)
	if err != nil {
		return in, err
	}
	for _, sf := range []struct {
		name string
		dst  **string
	}{{"name", &in.Name}, {"description", &in.Description}} {
		if *sf.dst, err = fieldString(f, sf.name); err != nil {
			return in, domain.Invalidf("%s has the wrong type", sf.name)
		}
	}
	const positionRule = "category_position must be an integer of at least 1"
	pos, err := fieldInt(f, "category_position", positionRule)
	if err != nil {
		return in, err
	}
	if pos != nil {
		if *pos < 1 {
			return in, domain.Invalidf(positionRule)
		}
		in.Position = *pos
	}
	urls, err := s.saveImages(c, 1)
	if err != nil {
		return in, err
	}
	if len(urls) == 1 {
		in.ImageURL = &urls[0]
	}
	return in, nil
}

// discard removes an uploaded image the command did not keep.
func (s *Server) discard(c echo.Context, in categoryInput) {
	if in.ImageURL != nil {
		s.removeFiles(c, []string{*in.ImageURL})
	}
}

func (s *Server) createCategory(c echo.Context) error {
	in, err := s.categoryInput(c)
	if err != nil {
		return err
	}
	id, pos, err := s.app.CreateCategory(c.Request().Context(), actor(c),
		category.New{Name: deref(in.Name), Description: deref(in.Description), ImageURL: deref(in.ImageURL)}, in.Position)
	if err != nil {
		s.discard(c, in)
		return err
	}
	return s.respondCategory(c, id, pos, http.StatusCreated, "Category created successfully")
}

func (s *Server) editCategory(c echo.Context) error {
	in, err := s.categoryInput(c)
	if err != nil {
		return err
	}
	id := c.Param("id")
	before, err := s.app.Category(c.Request().Context(), id)
	if err != nil {
		s.discard(c, in)
		return err
	}
	pos, err := s.app.UpdateCategory(c.Request().Context(), actor(c), id,
		category.Edit{Name: in.Name, Description: in.Description, ImageURL: in.ImageURL}, in.Position)
	if err != nil {
		s.discard(c, in)
		return err
	}
	if in.ImageURL != nil && before.ImageURL != "" && before.ImageURL != *in.ImageURL {
		s.removeFiles(c, []string{before.ImageURL}) // replaced: no longer shown
	}
	return s.respondCategory(c, id, pos, http.StatusOK, "Category updated successfully")
}

// moveCategory is PUT /v1/escrow/category/position/{categoryId}
// {newPosition}: 1-based; the others renumber.
func (s *Server) moveCategory(c echo.Context) error {
	var body map[string]json.RawMessage
	if err := decodeJSON(c, &body); err != nil {
		return err
	}
	const rule = "newPosition must be an integer of at least 1"
	n, err := fieldInt(body, "newPosition", rule)
	if err != nil {
		return err
	}
	if n == nil {
		return domain.Invalidf("newPosition is required")
	}
	if *n < 1 {
		return domain.Invalidf(rule)
	}
	id := c.Param("id")
	pos, err := s.app.MoveCategory(c.Request().Context(), actor(c), id, *n)
	if err != nil {
		return err
	}
	return s.respondCategory(c, id, pos, http.StatusOK, "Category position updated successfully")
}

func (s *Server) deleteCategory(c echo.Context) error {
	before, err := s.app.Category(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	if _, err := s.app.DeleteCategory(c.Request().Context(), actor(c), c.Param("id")); err != nil {
		return err
	}
	if before.ImageURL != "" {
		s.removeFiles(c, []string{before.ImageURL})
	}
	return respond(c, http.StatusOK, "Category deleted successfully", nil)
}

func (s *Server) getCategory(c echo.Context) error {
	cat, err := s.ownCategory(c, c.Param("id"))
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Category fetched successfully", cat)
}

func (s *Server) listCategories(c echo.Context) error {
	p, _ := PrincipalFrom(c)
	q, err := s.readModels(c, projections.CategoriesName)
	if err != nil {
		return err
	}
	list, pg, err := q.ListCategories(c.Request().Context(), p.MerchantID, p.Environment, pageParams(c, 100))
	if err != nil {
		return err
	}
	return respond(c, http.StatusOK, "Categories fetched successfully", map[string]any{"data": list, "pagination": pg})
}

// respondCategory answers a write with the category as the read model holds
// it once it includes the write.
func (s *Server) respondCategory(c echo.Context, id string, pos eventstore.Position, status int, msg string) error {
	if err := s.awaitWrite(c, pos, projections.CategoriesName); err != nil {
		return err
	}
	cat, err := s.ownCategory(c, id)
	if err != nil {
		return err
	}
	return respond(c, status, msg, cat)
}
